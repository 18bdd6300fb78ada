"""What error text reaches a client: a real `shunter serve` in front of upstreams that
echo the credentials the gateway sent them and name internal addresses, an upstream that
is not there, and a local model that cannot load. Neither the client nor the log may show a
provider key; the client sees no internal address or server path, the log keeps them."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from gateway.apis.registry import apis
from tests.conftest import Server, free_port, start_server, stop_server
from tests.gateway.http.leaky_upstream import LeakyUpstream

HELLO = [{"role": "user", "content": "hi"}]
# neither looks like a well-known key format: only knowing what was sent can find them
OPENAI_KEY = "prov_" + secrets.token_hex(16)
ANTHROPIC_KEY = "ant_" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def leaky() -> Iterator[LeakyUpstream]:
    with LeakyUpstream("401") as upstream:
        yield upstream


@pytest.fixture(scope="module")
def junk_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secret-place") / "not-a-model.gguf"
    path.write_bytes(b"this is not a GGUF file" * 100)
    return path


@pytest.fixture(scope="module")
def gateway(
    leaky: LeakyUpstream, junk_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("error-text")
    config = folder / "shunter.yaml"
    closed = free_port()
    config.write_text(
        "reliability: {retries: 0, failure_threshold: 1000}\n"
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{leaky.url}/v1', model: m,"
        " api_key_env: LEAKY_OPENAI_KEY, embeddings: true}\n"
        f"  - {{name: claude, backend: anthropic, base_url: '{leaky.url}', model: c,"
        " api_key_env: LEAKY_ANTHROPIC_KEY}\n"
        f"  - {{name: nowhere, backend: openai, base_url: 'http://127.0.0.1:{closed}/v1',"
        " model: m, timeouts: {connect_s: 5}}\n"
        f"  - {{name: lazy, backend: llamacpp, model: {junk_model}, preload: false}}\n"
        "models:\n"
        "  up: {candidates: [up]}\n"
        "  claude: {candidates: [claude]}\n"
        "  nowhere: {candidates: [nowhere]}\n"
        "  lazy: {candidates: [lazy]}\n"
    )
    env = {"LEAKY_OPENAI_KEY": OPENAI_KEY, "LEAKY_ANTHROPIC_KEY": ANTHROPIC_KEY}
    server = start_server(config, folder / "server.log", env=env)
    yield server
    stop_server(server)


@pytest.fixture
def client(gateway: Server) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.api, api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


def assert_clean(text: str, leaky: LeakyUpstream) -> None:
    """No credential and no internal address in ``text``."""
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, OPENAI_KEY[5:], ANTHROPIC_KEY[4:]):
        assert secret not in text
    for address in (f"127.0.0.1:{leaky.port}", "10.20.30.40", f":{leaky.port}"):
        assert address not in text


@pytest.mark.parametrize("mode", ["401", "500"])
@pytest.mark.parametrize("model", ["up", "claude"])
def test_an_upstream_error_that_echoes_our_credentials_is_scrubbed(
    gateway: Server, leaky: LeakyUpstream, client: OpenAI, model: str, mode: str
) -> None:
    leaky.mode = mode
    sent = len(leaky.requests)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=model, messages=HELLO)
    assert len(leaky.requests) > sent  # it did go out, with the provider key
    assert OPENAI_KEY in str(leaky.requests[-1]) or ANTHROPIC_KEY in str(leaky.requests[-1])
    assert caught.value.status_code == 502
    assert_clean(caught.value.response.text, leaky)
    assert f"upstream {model}" in caught.value.message
    streamed = httpx.post(
        f"{gateway.api}/chat/completions",
        json={"model": model, "messages": HELLO, "stream": True},
        timeout=60,
    )
    assert streamed.status_code == 502
    assert_clean(streamed.text, leaky)


def test_an_error_in_the_middle_of_a_stream_is_scrubbed(
    gateway: Server, leaky: LeakyUpstream
) -> None:
    leaky.mode = "midstream"
    body = {"model": "up", "messages": HELLO, "stream": True}
    with httpx.stream("POST", f"{gateway.api}/chat/completions", json=body, timeout=60) as answer:
        assert answer.status_code == 200
        frames = [line for line in answer.iter_lines() if line]
    assert frames[-1] == "data: [DONE]"
    error = json.loads(frames[-2].removeprefix("data: "))["error"]
    assert "Invalid credentials" in error["message"]
    assert_clean("\n".join(frames), leaky)


def test_a_failed_connection_does_not_name_the_upstream_address(client: OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="nowhere", messages=HELLO)
    assert caught.value.status_code == 503
    text = caught.value.response.text
    assert "cannot connect to upstream nowhere" in text
    assert "127.0.0.1" not in text and "Errno" not in text


def test_a_model_that_fails_to_load_does_not_show_its_path(
    gateway: Server, client: OpenAI, junk_model: Path
) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="lazy", messages=HELLO)
    assert caught.value.status_code == 503
    assert caught.value.code == "model_load_failed"
    assert "model failed to load" in caught.value.message
    assert str(junk_model.parent) not in caught.value.response.text
    assert "secret-place" not in caught.value.response.text
    assert "secret-place" in gateway.log()  # the operator still learns which file


def test_the_log_keeps_the_detail_but_no_credential(
    gateway: Server, leaky: LeakyUpstream, client: OpenAI
) -> None:
    leaky.mode = "401"
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="up", messages=HELLO)
    log = gateway.log()
    assert OPENAI_KEY not in log and ANTHROPIC_KEY not in log
    assert OPENAI_KEY[5:] not in log and ANTHROPIC_KEY[4:] not in log
    details = [line for line in log.splitlines() if '"upstream_error"' in line]
    assert details and "[redacted]" in details[-1]
    assert f"127.0.0.1:{leaky.port}" in details[-1]  # where it failed, for the operator


GENERATION_SAMPLES: dict[str, Any] = {
    "chat": {"messages": HELLO},
    "text_completion": {"prompt": "hi"},
    "embeddings": {"input": "hi"},
    "responses": {"input": "hi"},
    "messages": {"max_tokens": 8, "messages": HELLO},
    "generate_content": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
}


def _generations() -> list[tuple[str, str, str]]:
    """Every generation operation the registry declares: (API, operation, path for ``up``)."""
    found = []
    for api in apis():
        for operation in api.operations:
            if operation.codec is None:
                continue
            path = operation.path
            if "{" in path:  # the model in the path: ``{model}:action``
                path = path[: path.index("{")] + f"up:{operation.action}"
            found.append((api.name, operation.name, path))
    return found


@pytest.mark.parametrize(("api", "operation", "path"), _generations())
def test_every_generation_operation_scrubs_an_echoed_credential(
    gateway: Server, leaky: LeakyUpstream, api: str, operation: str, path: str
) -> None:
    leaky.mode = "500"
    body = dict(GENERATION_SAMPLES[operation])
    if operation != "generate_content":
        body["model"] = "up"
    if path.endswith("/compact"):
        body = {"model": "up", "input": [{"role": "user", "content": "hi"}]}
    sent = len(leaky.requests)
    answer = httpx.post(f"{gateway.base_url}{path}", json=body, timeout=60)
    assert len(leaky.requests) > sent, answer.text  # it went out, with the provider key
    assert answer.status_code >= 500, answer.text
    assert_clean(answer.text, leaky)
    assert "error" in answer.json()
