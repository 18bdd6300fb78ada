"""An image sent to a model whose deployments read no images is a 400 naming the image's
field as the API called names it and saying which model takes no images (chat, Responses,
Messages), on a real `shunter serve` in front of loopback OpenAI-compatible upstreams; a
model with one deployment that reads images is routed there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGA"
    "hKmMIQAAAABJRU5ErkJggg=="
)
DATA_URL = f"data:image/png;base64,{PNG}"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("images")
    with FaultUpstream() as upstream:
        (folder / "shunter.yaml").write_text(
            "deployments:\n"
            f"  - {{name: text, backend: openai, base_url: '{upstream.url}', model: t,"
            " images: false}\n"
            f"  - {{name: vision, backend: openai, base_url: '{upstream.url}', model: v}}\n"
            "models:\n"
            "  texty: {candidates: [text]}\n"
            "  either: {candidates: [text, vision]}\n"
        )
        server = start_server(folder / "shunter.yaml", folder / "server.log")
        try:
            yield server
        finally:
            stop_server(server)


def chat(model: str) -> dict[str, Any]:
    parts = [
        {"type": "text", "text": "what is it?"},
        {"type": "image_url", "image_url": {"url": DATA_URL}},
    ]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": parts}]
    return {"model": model, "messages": messages}


def responses(model: str) -> dict[str, Any]:
    parts = [
        {"type": "input_text", "text": "what is it?"},
        {"type": "input_image", "image_url": DATA_URL},
    ]
    return {"model": model, "input": [{"role": "user", "content": parts}]}


def messages(model: str) -> dict[str, Any]:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    turns = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": "what is it?"}, image]},
    ]
    return {"model": model, "max_tokens": 16, "system": "be brief", "messages": turns}


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.api}{path}", json=body, timeout=30)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/chat/completions", chat, "messages[1].content[1]"),
        ("/responses", responses, "input[0].content[1]"),
    ],
)
def test_an_image_for_a_text_only_model_names_its_field(
    gateway: Server, path: str, body: Any, param: str
) -> None:
    answer = post(gateway, path, body("texty"))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param
    assert error["code"] == "images_not_supported"
    assert "model 'texty' accepts no images" in error["message"]
    assert "candidate" not in error["message"]


def test_an_image_block_for_a_text_only_model_names_its_field_in_messages(
    gateway: Server,
) -> None:
    answer = post(gateway, "/messages", messages("texty"))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "model 'texty' accepts no images" in error["message"]
    assert "messages[2].content[1]" in error["message"]


@pytest.mark.parametrize(("path", "body"), [("/chat/completions", chat), ("/messages", messages)])
def test_a_model_with_a_deployment_that_reads_images_serves_them(
    gateway: Server, path: str, body: Any
) -> None:
    answer = post(gateway, path, body("either"))
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-shunter-deployment"] == "vision"
