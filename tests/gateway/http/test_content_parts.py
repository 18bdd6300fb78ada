"""A content part no deployment of the model reads is a 400 naming the part as the API
called names it (chat, Responses, Messages), before any deployment is tried; a model with
a deployment that reads the part sends it there and not to one that cannot read it. On a
real `shunter serve` with a real llama.cpp model (which reads text only) and a loopback
OpenAI-compatible upstream (which passes every part on)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGA"
    "hKmMIQAAAABJRU5ErkJggg=="
)
WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA="
AUDIO = {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}
IMAGE = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
PDF = "data:application/pdf;base64,JVBERi0xLjQK"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def gateway(
    tiny_model: Path, upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("content-parts")
    (folder / "shunter.yaml").write_text(
        "deployments:\n"
        f"  - {{name: local, backend: llamacpp, model: '{tiny_model}', n_ctx: 1024,"
        " threads: 1, parallel: 1}\n"
        f"  - {{name: remote, backend: openai, base_url: '{upstream.url}', model: up}}\n"
        "models:\n"
        "  tiny: {candidates: [local]}\n"
        "  mixed: {candidates: [local, remote]}\n"
        "  far: {candidates: [remote]}\n"
    )
    server = start_server(folder / "shunter.yaml", folder / "server.log")
    try:
        yield server
    finally:
        stop_server(server)


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.api}{path}", json=body, timeout=60)


def chat(model: str, part: dict[str, Any]) -> dict[str, Any]:
    content = [{"type": "text", "text": "what is it?"}, part]
    return {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": content}]}


def refusal(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 400, answer.text
    error: dict[str, Any] = answer.json()["error"]
    return error


def test_an_audio_part_for_a_text_only_model_is_refused_by_place(
    gateway: Server, upstream: FaultUpstream
) -> None:
    seen = len(upstream.requests)
    error = refusal(post(gateway, "/chat/completions", chat("tiny", AUDIO)))
    assert error["code"] == "content_part_not_supported"
    assert error["param"] == "messages[0].content[1]"
    assert "model 'tiny'" in error["message"] and "'input_audio'" in error["message"]
    assert "candidate" not in error["message"]
    assert len(upstream.requests) == seen


@pytest.mark.parametrize(
    ("part", "kind"),
    [
        ({"type": "file", "file": {"file_data": PDF, "filename": "a.pdf"}}, "file"),
        ({"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}, "video_url"),
        ({"type": "mystery"}, "mystery"),
    ],
)
def test_any_part_kind_a_model_cannot_read_is_refused_by_place(
    gateway: Server, part: dict[str, Any], kind: str
) -> None:
    error = refusal(post(gateway, "/chat/completions", chat("tiny", part)))
    assert error["code"] == "content_part_not_supported"
    assert error["param"] == "messages[0].content[1]"
    assert f"'{kind}'" in error["message"]


def test_an_image_keeps_its_own_code(gateway: Server) -> None:
    error = refusal(post(gateway, "/chat/completions", chat("tiny", IMAGE)))
    assert error["code"] == "images_not_supported"
    assert error["param"] == "messages[0].content[1]"
    assert "model 'tiny' accepts no images" in error["message"]


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
        {"type": "input_file", "file_data": PDF, "filename": "a.pdf"},
    ],
)
def test_responses_name_their_own_field(gateway: Server, part: dict[str, Any]) -> None:
    content = [{"type": "input_text", "text": "what is it?"}, part]
    body = {"model": "tiny", "input": [{"role": "user", "content": content}]}
    error = refusal(post(gateway, "/responses", body))
    assert error["code"] == "content_part_not_supported"
    assert error["param"] == "input[0].content[1]"


def test_responses_parts_reach_a_deployment_that_reads_them(
    gateway: Server, upstream: FaultUpstream
) -> None:
    parts = [
        {"type": "input_text", "text": "what is it?"},
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
        {"type": "input_file", "file_data": PDF, "filename": "a.pdf"},
    ]
    body = {"model": "mixed", "input": [{"role": "user", "content": parts}], "store": False}
    answer = post(gateway, "/responses", body)
    assert answer.status_code == 200, answer.text
    sent = upstream.requests[-1].body["messages"][-1]["content"]
    assert sent[1] == {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}
    assert sent[2] == {"type": "file", "file": {"file_data": PDF, "filename": "a.pdf"}}


def test_messages_name_their_own_blocks(gateway: Server) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
    }
    for block in (image, document):
        content = [{"type": "text", "text": "what is it?"}, block]
        body = {
            "model": "tiny",
            "max_tokens": 4,
            "messages": [{"role": "user", "content": content}],
        }
        answer = post(gateway, "/messages", body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert "messages[0].content[1]" in error["message"]


@pytest.mark.parametrize(("title", "name"), [("a.pdf", "a.pdf"), (None, "document.pdf")])
def test_a_messages_pdf_reaches_a_deployment_that_reads_files(
    gateway: Server, upstream: FaultUpstream, title: str | None, name: str
) -> None:
    source = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}
    document = {"type": "document", "source": source, **({"title": title} if title else {})}
    content = [{"type": "text", "text": "sum it up"}, document]
    body = {"model": "far", "max_tokens": 4, "messages": [{"role": "user", "content": content}]}
    answer = post(gateway, "/messages", body)
    assert answer.status_code == 200, answer.text
    sent = upstream.requests[-1].body["messages"][-1]["content"]
    assert sent[1] == {"type": "file", "file": {"file_data": PDF, "filename": name}}


@pytest.mark.parametrize("part", [AUDIO, IMAGE, {"type": "mystery"}])
def test_a_part_goes_to_the_deployment_that_reads_it(
    gateway: Server, upstream: FaultUpstream, part: dict[str, Any]
) -> None:
    answer = post(gateway, "/chat/completions", chat("mixed", part))
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-shunter-deployment"] == "remote"
    assert upstream.requests[-1].body["messages"][0]["content"][1] == part


def test_text_alone_may_go_to_either(gateway: Server) -> None:
    text = {"type": "text", "text": "and now?"}
    answer = post(gateway, "/chat/completions", chat("tiny", text))
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-shunter-deployment"] == "local"
