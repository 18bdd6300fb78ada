"""The content parts an in-process vLLM deployment reads are what vLLM reports the loaded
model reads (the settings' ``modalities`` until it is loaded): the gateway routes an image
to an image model and refuses, by place and before vLLM is called, a part the model cannot
read. The fake engine and serving layer of tests/backends/vllm/fake_vllm.py stand in for
vLLM, behind the gateway's real app."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from backends.base import Backend
from backends.vllm.backend import VLLMBackend, VLLMSettings
from gateway.config import parse_config
from gateway.dispatch import Gateway
from gateway.http.app import AppSettings, create_app
from tests.backends.vllm.fake_vllm import FakeServing, FakeVLLM

CONFIG = """
deployments:
  - {name: plain, backend: vllm, model: org/plain}
  - {name: vision, backend: vllm, model: org/vision}
  - {name: listener, backend: vllm, model: org/listener}
models:
  plain: {candidates: [plain]}
  vision: {candidates: [vision]}
  listener: {candidates: [listener]}
  either: {candidates: [plain, vision]}
"""
PNG = "data:image/png;base64,iVBORw0KGgo="
IMAGE = {"type": "image_url", "image_url": {"url": PNG}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
AUDIO_URL = {"type": "audio_url", "audio_url": {"url": "https://example.com/a.wav"}}
VIDEO = {"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}

Fakes = dict[str, FakeVLLM]


@pytest.fixture(scope="module")
def fakes() -> Fakes:
    """Each deployment's engine, reporting what its model reads besides text."""
    return {
        "plain": FakeVLLM(modalities=frozenset()),
        "vision": FakeVLLM(modalities=frozenset({"image"})),
        "listener": FakeVLLM(modalities=frozenset({"audio"})),
    }


@pytest.fixture(scope="module")
def client(fakes: Fakes) -> Iterator[TestClient[Any]]:
    config = parse_config(CONFIG, "t.yaml")
    backends: dict[str, Backend] = {}
    for deployment in config.deployments:
        assert isinstance(deployment, VLLMSettings)
        backends[deployment.name] = VLLMBackend(
            deployment, engine_factory=fakes[deployment.name].factory
        )
    with TestClient(create_app(AppSettings(config=config), Gateway(config, backends))) as c:
        yield c


def served(fakes: Fakes, name: str) -> FakeServing:
    serving = fakes[name].serving
    assert serving is not None
    return serving


def chat(model: str, part: dict[str, Any]) -> dict[str, Any]:
    content = [{"type": "text", "text": "what is it?"}, part]
    return {"model": model, "max_tokens": 3, "messages": [{"role": "user", "content": content}]}


def test_an_image_model_vllm_reports_gets_images(client: TestClient[Any], fakes: Fakes) -> None:
    answer = client.post("/v1/chat/completions", json=chat("vision", IMAGE))
    assert answer.status_code == 200, answer.text
    assert served(fakes, "vision").bodies[-1]["messages"][0]["content"][1] == IMAGE


def test_an_image_goes_to_the_deployment_whose_model_reads_it(
    client: TestClient[Any], fakes: Fakes
) -> None:
    before = len(served(fakes, "plain").bodies)
    answer = client.post("/v1/chat/completions", json=chat("either", IMAGE))
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-shunter-deployment"] == "vision"
    assert len(served(fakes, "plain").bodies) == before


@pytest.mark.parametrize(
    ("model", "part", "code"),
    [
        ("plain", IMAGE, "images_not_supported"),
        ("plain", AUDIO, "content_part_not_supported"),
        ("vision", AUDIO, "content_part_not_supported"),
        ("vision", VIDEO, "content_part_not_supported"),
        ("listener", IMAGE, "images_not_supported"),
        ("vision", {"type": "file", "file": {"file_id": "f"}}, "content_part_not_supported"),
    ],
)
def test_a_part_the_model_cannot_read_is_refused_before_vllm_is_called(
    client: TestClient[Any], fakes: Fakes, model: str, part: dict[str, Any], code: str
) -> None:
    before = len(served(fakes, model).bodies)
    answer = client.post("/v1/chat/completions", json=chat(model, part))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == code and error["param"] == "messages[0].content[1]"
    assert len(served(fakes, model).bodies) == before


@pytest.mark.parametrize("part", [AUDIO, AUDIO_URL])
def test_an_audio_model_gets_audio_both_ways(
    client: TestClient[Any], fakes: Fakes, part: dict[str, Any]
) -> None:
    answer = client.post("/v1/chat/completions", json=chat("listener", part))
    assert answer.status_code == 200, answer.text
    assert served(fakes, "listener").bodies[-1]["messages"][0]["content"][1] == part


def settings(**overrides: Any) -> VLLMSettings:
    fields: dict[str, Any] = {"name": "v", "backend": "vllm", "model": "org/v"}
    return VLLMSettings.model_validate({**fields, **overrides})


async def test_before_start_the_settings_say_what_the_model_reads() -> None:
    assert VLLMBackend(settings()).capabilities.content_parts == {"text"}
    declared = VLLMBackend(settings(modalities=["image", "video"])).capabilities
    assert declared.images and declared.content_parts == {"text", "image_url", "video_url"}
    with pytest.raises(ValueError):
        settings(modalities=["smell"])


async def test_once_started_vllm_has_the_last_word() -> None:
    fake = FakeVLLM(modalities=frozenset())
    backend = VLLMBackend(settings(modalities=["image"]), engine_factory=fake.factory)
    assert backend.capabilities.images
    await backend.start()
    assert not backend.capabilities.images and backend.capabilities.content_parts == {"text"}
    await backend.aclose()
    unreported = FakeVLLM()  # an engine that says nothing: the settings stand
    backend = VLLMBackend(settings(modalities=["audio"]), engine_factory=unreported.factory)
    await backend.start()
    assert backend.capabilities.content_parts == {"text", "input_audio", "audio_url"}
    await backend.aclose()
