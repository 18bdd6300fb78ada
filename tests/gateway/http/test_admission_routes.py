"""One admission for every /v1 route, on real processes: `shunter serve` with virtual keys
in a real redis-server, in front of a loopback OpenAI-compatible upstream, driven by the
openai SDK and raw sockets."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from gateway.admission.keys import KeyRing
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer, start_redis

MASTER = "sk-master-admission-routes"
HELLO = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Keys:
    full: str
    scoped: str  # may use the model "chat" only
    revoked: str
    limited: str  # 2 requests per minute
    budgeted: str  # $0.5, and every embedding here costs $1
    counting: str  # 2 requests per minute, for token counts


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def keys(redis: RedisServer) -> Keys:
    async def create() -> Keys:
        store = RedisStateStore.from_url(redis.url, prefix="shunter")
        ring = KeyRing(store)
        try:
            revoked, record = await ring.create("revoked")
            await ring.revoke(record.id)
            return Keys(
                full=(await ring.create("full"))[0],
                scoped=(await ring.create("scoped", models=("chat",)))[0],
                revoked=revoked,
                limited=(await ring.create("limited", rpm=2))[0],
                budgeted=(await ring.create("budgeted", budget_usd=0.5))[0],
                counting=(await ring.create("counting", rpm=2))[0],
            )
        finally:
            await store.aclose()

    return asyncio.run(create())


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(
    redis: RedisServer,
    keys: Keys,
    upstream: FaultUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("admission-routes")
    config = folder / "shunter.yaml"
    remote = f"backend: openai, base_url: '{upstream.url}', model: up"
    dollar_a_token = "price: {input_per_1m: 1000000, output_per_1m: 1000000}"
    config.write_text(
        "deployments:\n"
        f"  - {{name: emb, {remote}, embeddings: true, {dollar_a_token}}}\n"
        f"  - {{name: emb-tight, {remote}, embeddings: true, rpm: 1}}\n"
        f"  - {{name: chat, {remote}}}\n"
        "models:\n"
        "  emb: {candidates: [emb]}\n"
        "  emb-tight: {candidates: [emb-tight]}\n"
        "  chat: {candidates: [chat]}\n"
    )
    env = {"SHUNTER_REDIS_URL": redis.url, "SHUNTER_MASTER_KEY": MASTER}
    server = start_server(config, folder / "server.log", env=env)
    yield server
    stop_server(server)


def sdk(gateway: Server, key: str) -> OpenAI:
    return OpenAI(base_url=gateway.api, api_key=key, max_retries=0, timeout=30)


def test_embeddings_need_a_key_that_may_use_the_model(
    gateway: Server, keys: Keys, upstream: FaultUpstream
) -> None:
    sent = len(upstream.requests)
    anonymous = httpx.post(
        f"{gateway.api}/embeddings", json={"model": "emb", "input": "hi"}, timeout=30
    )
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "invalid_api_key"
    with sdk(gateway, "sk-shunter-made-up") as client, pytest.raises(openai.AuthenticationError):
        client.embeddings.create(model="emb", input="hi")
    with sdk(gateway, keys.revoked) as client, pytest.raises(openai.PermissionDeniedError) as rev:
        client.embeddings.create(model="emb", input="hi")
    assert rev.value.code == "key_revoked"
    with sdk(gateway, keys.scoped) as client, pytest.raises(openai.PermissionDeniedError) as out:
        client.embeddings.create(model="emb", input="hi")
    assert out.value.code == "model_not_allowed"
    assert len(upstream.requests) == sent  # none of them reached the provider
    for key in (keys.full, MASTER):
        with sdk(gateway, key) as client:
            raw = client.embeddings.with_raw_response.create(model="emb", input=["a", "b"])
        assert len(raw.parse().data) == 2
        assert raw.headers["x-shunter-deployment"] == "emb"
    assert len(upstream.requests) == sent + 2


def test_a_bad_key_is_refused_before_the_body_is_read(gateway: Server, keys: Keys) -> None:
    port = int(gateway.base_url.rsplit(":", 1)[1])
    for path in ("/v1/embeddings", "/v1/chat/completions", "/v1/completions"):
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            # a body of 5 MB is announced and never sent: only the head can be checked
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer nope\r\n"
                "content-type: application/json\r\ncontent-length: 5000000\r\n\r\n".encode()
            )
            head = sock.recv(65536).decode("latin-1")
        assert head.startswith("HTTP/1.1 401"), head
    garbage = {"content-type": "application/json", "authorization": "Bearer nope"}
    bad = httpx.post(f"{gateway.api}/embeddings", content=b"{not json", headers=garbage)
    assert bad.status_code == 401
    garbage["authorization"] = f"Bearer {keys.full}"
    parsed = httpx.post(f"{gateway.api}/embeddings", content=b"{not json", headers=garbage)
    assert parsed.status_code == 400


def test_a_keys_rate_limit_applies_to_embeddings(gateway: Server, keys: Keys) -> None:
    with sdk(gateway, keys.limited) as client:
        for _ in range(2):
            raw = client.embeddings.with_raw_response.create(model="emb", input="hi")
            assert raw.headers["x-ratelimit-limit-requests"] == "2"
        with pytest.raises(openai.RateLimitError) as caught:
            client.embeddings.create(model="emb", input="hi")
    assert int(caught.value.response.headers["retry-after"]) >= 1


def test_a_keys_rate_limit_applies_to_token_counts(gateway: Server, keys: Keys) -> None:
    body = {"model": "chat", "messages": HELLO}
    headers = {"x-api-key": keys.counting, "anthropic-version": "2023-06-01"}
    url = f"{gateway.base_url}/v1/messages/count_tokens"
    for _ in range(2):
        counted = httpx.post(url, json=body, headers=headers, timeout=30)
        assert counted.status_code == 200, counted.text
        assert counted.json()["input_tokens"] > 0
    refused = httpx.post(url, json=body, headers=headers, timeout=30)
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert int(refused.headers["retry-after"]) >= 1


def test_a_deployments_rate_limit_applies_to_embeddings(gateway: Server, keys: Keys) -> None:
    with sdk(gateway, keys.full) as client:
        client.embeddings.create(model="emb-tight", input="hi")
        with pytest.raises(openai.RateLimitError) as caught:
            client.embeddings.create(model="emb-tight", input="hi")
    assert "deployment 'emb-tight'" in caught.value.message


def test_embeddings_are_charged_to_the_budget(gateway: Server, keys: Keys) -> None:
    with sdk(gateway, keys.budgeted) as client:
        client.embeddings.create(model="emb", input="hi")  # $1 of a $0.5 budget
        with pytest.raises(openai.RateLimitError) as caught:
            client.embeddings.create(model="emb", input="hi")
    assert caught.value.code == "insufficient_quota"
    assert _answered_line(gateway, "/v1/embeddings")["cost_usd"] > 0


def _answered_line(gateway: Server, path: str) -> dict[str, Any]:
    """The access line of the first answered request on ``path``: a line is written once
    its response is done, so it may come after the client has read the answer (and sent
    its next request)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(x) for x in gateway.log().splitlines() if '"event": "request"' in x]
        answered = [x for x in lines if x["path"] == path and x["status"] == 200]
        if answered or time.monotonic() > deadline:
            assert answered, gateway.log()[-3000:]
            return answered[0]
        time.sleep(0.05)


def test_the_model_list_shows_what_the_key_may_use(gateway: Server, keys: Keys) -> None:
    assert httpx.get(f"{gateway.api}/models").status_code == 401
    assert httpx.get(f"{gateway.api}/models/chat").status_code == 401
    assert httpx.get(f"{gateway.api}/worker/stats").status_code == 401
    with sdk(gateway, keys.scoped) as client:
        assert [m.id for m in client.models.list().data] == ["chat"]
        assert client.models.retrieve("chat").id == "chat"
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("emb")
    with sdk(gateway, keys.full) as client:
        assert sorted(m.id for m in client.models.list().data) == ["chat", "emb", "emb-tight"]
    stats = httpx.get(f"{gateway.api}/worker/stats", headers={"authorization": f"Bearer {MASTER}"})
    assert stats.status_code == 200


def test_an_oversize_model_name_is_cut_in_the_log(gateway: Server, keys: Keys) -> None:
    huge = "m" * 100_000
    before = Path(gateway.log_path).stat().st_size
    for key in (None, keys.full):
        headers = {"authorization": f"Bearer {key}"} if key else {}
        for path in ("/embeddings", "/chat/completions"):
            body = {"model": huge, "input": "hi", "messages": HELLO}
            answer = httpx.post(f"{gateway.api}{path}", json=body, headers=headers, timeout=30)
            assert answer.status_code in (401, 404)
    grown = Path(gateway.log_path).stat().st_size - before
    assert grown < 8_000  # four lines; the name alone is 100 KB
    cut = [line for line in gateway.log().splitlines() if "(+" in line and '"model"' in line]
    assert cut and all(len(line) < 2_000 for line in cut)
