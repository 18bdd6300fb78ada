"""What an OpenAI-compatible upstream receives of a client's request: every field the client
sent, as sent, but for the fields the gateway owns (``model``, ``stream``,
``stream_options.include_usage``), and nothing of the client's own credentials. The real
`shunter serve` process, the real openai SDK as the client, a real upstream on loopback
that records each body it is sent; small bodies and large ones (decoded and encoded by
another path) alike."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

CLIENT_KEY = "sk-client-secret-1234"
UNICODE = 'déjà vu — 中文 — 🚀 — "quoted" \\ back\tslash\nnew line \u2028 \x01 — ÿ'
EXTRA = {
    "vendor_extension": {"nested": [1, 2.5, {"x": None, "y": [True, False]}], "é": "ü"},
    "top_k": 40,
    "repetition_penalty": 1.1,
}
KNOWN = {
    "temperature": 0.3,
    "top_p": 0.9,
    "max_completion_tokens": 64,
    "seed": 7,
    "stop": ["\n\n", "END"],
    "presence_penalty": 0.5,
    "logit_bias": {"50256": -100},
    "user": "user-42",
    "metadata": {"trace": "abc"},
    "response_format": {"type": "json_object"},
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as fake:
        yield fake


@pytest.fixture(scope="module")
def server(upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("upstream-body")
    config = tmp / "shunter.yaml"
    config.write_text(
        f"""
deployments:
  - {{name: up, backend: openai, base_url: "{upstream.url}", model: upstream-model}}
models:
  public-model: {{candidates: [up]}}
"""
    )
    srv = start_server(Path(config), tmp / "log")
    yield srv
    stop_server(srv)


@pytest.fixture
def client(server: Server) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.api, api_key=CLIENT_KEY, max_retries=0) as sdk:
        yield sdk


def messages(text: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": text}]},
        {"role": "assistant", "content": "ok", "name": "helper"},
        {"role": "user", "content": text},
    ]


def sent_as_is(sent: dict[str, Any], client_body: dict[str, Any]) -> None:
    """Every field of the client's body reached the upstream unchanged."""
    for key, value in client_body.items():
        assert sent[key] == value, key


def test_every_field_goes_as_sent_but_the_model(client: OpenAI, upstream: FaultUpstream) -> None:
    body = {"messages": messages(UNICODE), **KNOWN}
    reply = client.chat.completions.create(model="public-model", extra_body=EXTRA, **body)  # type: ignore[call-overload]
    sent = upstream.last().body
    assert sent["model"] == "upstream-model" and reply.model == "upstream-model"
    assert sent["stream"] is False and "stream_options" not in sent
    sent_as_is(sent, {**body, **EXTRA})
    assert set(sent) == {*body, *EXTRA, "model", "stream"}


def test_a_stream_asks_for_usage_and_keeps_the_clients_stream_options(
    client: OpenAI, upstream: FaultUpstream
) -> None:
    body = {"messages": messages(UNICODE), **KNOWN}
    options = {"include_usage": False, "include_obfuscation": False}
    chunks = list(
        client.chat.completions.create(  # type: ignore[call-overload]
            model="public-model", stream=True, stream_options=options, extra_body=EXTRA, **body
        )
    )
    sent = upstream.last().body
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True, "include_obfuscation": False}
    sent_as_is(sent, {**body, **EXTRA})
    assert set(sent) == {*body, *EXTRA, "model", "stream", "stream_options"}
    assert chunks and all(c.usage is None for c in chunks)  # the client did not ask for it
    assert {c.model for c in chunks} == {"upstream-model"}  # the model that answered


def test_the_clients_key_stays_with_the_gateway(client: OpenAI, upstream: FaultUpstream) -> None:
    client.chat.completions.create(model="public-model", messages=messages("hi"))
    headers = upstream.last().headers
    assert not any(CLIENT_KEY in value for value in headers.values())


@pytest.mark.parametrize("stream", [False, True])
def test_a_9_mb_conversation_arrives_whole(
    client: OpenAI, upstream: FaultUpstream, stream: bool
) -> None:
    line = "def relay(request): return déjà_vu(request)  # 🚀 a line of code\n"
    text = line * (9_000_000 // len(line.encode()))
    assert len(text.encode()) > 8_900_000
    reply = client.chat.completions.create(
        model="public-model",
        messages=[{"role": "user", "content": text}],
        stream=stream,
        extra_body=EXTRA,
    )
    if stream:
        assert [c for c in reply]  # type: ignore[union-attr]
    sent = upstream.last().body
    received = sent["messages"][0]["content"]
    assert hashlib.sha256(received.encode()).digest() == hashlib.sha256(text.encode()).digest()
    assert sent["model"] == "upstream-model" and sent["stream"] is stream
    sent_as_is(sent, EXTRA)
