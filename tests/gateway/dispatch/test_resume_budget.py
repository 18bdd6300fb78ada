"""A resumed answer is billed for what each upstream did: a real `shunter serve` with a
budgeted key in a real redis-server, a first upstream cut mid-answer, a second one that
continues it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from openai import OpenAI

from gateway.admission.keys import KeyRing
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import CHUNKS, FaultUpstream, prompt_tokens_of
from tests.redis_server import RedisServer, start_redis
from tests.waiting import eventually

HELLO = [{"role": "user", "content": "hi"}]
# dollars per million tokens
A_IN, A_OUT, B_IN, B_OUT = 1000.0, 2000.0, 5000.0, 3000.0


@dataclass(frozen=True)
class Setup:
    gateway: Server
    redis: RedisServer
    a: FaultUpstream
    b: FaultUpstream
    key: str
    key_id: str


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("resume-budget")
    redis = start_redis(folder)

    async def create() -> tuple[str, str]:
        store = RedisStateStore.from_url(redis.url, prefix="shunter")
        try:
            secret, record = await KeyRing(store).create("budgeted", budget_usd=100.0)
            return secret, record.id
        finally:
            await store.aclose()

    key, key_id = asyncio.run(create())
    with FaultUpstream() as a, FaultUpstream() as b:
        config = folder / "shunter.yaml"
        config.write_text(
            "deployments:\n"
            f"  - {{name: a, backend: openai, base_url: '{a.url}', model: up-a,"
            f" price: {{input_per_1m: {A_IN}, output_per_1m: {A_OUT}}}}}\n"
            f"  - {{name: b, backend: openai, base_url: '{b.url}', model: up-b,"
            f" price: {{input_per_1m: {B_IN}, output_per_1m: {B_OUT}}}}}\n"
            "models:\n  m: {candidates: [a, b]}\n"
        )
        env = {"SHUNTER_REDIS_URL": redis.url, "SHUNTER_MASTER_KEY": "sk-master-resume"}
        server = start_server(config, folder / "server.log", env=env)
        try:
            yield Setup(server, redis, a, b, key, key_id)
        finally:
            stop_server(server)
            redis.stop()


def spent(setup: Setup) -> float:
    async def read() -> float:
        store = RedisStateStore.from_url(setup.redis.url, prefix="shunter")
        try:
            return (await store.spend_get(f"key:{setup.key_id}", 30 * 86400)).usd
        finally:
            await store.aclose()

    return asyncio.run(read())


def test_a_resumed_answer_is_charged_what_both_upstreams_did(setup: Setup) -> None:
    setup.a.queue.append("cut:5")
    before, seen = spent(setup), len(setup.b.requests)
    with OpenAI(base_url=setup.gateway.api, api_key=setup.key, max_retries=0) as client:
        chunks = list(
            client.chat.completions.create(
                model="m", messages=HELLO, stream=True, stream_options={"include_usage": True}
            )
        )
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == CHUNKS
    (resumed,) = (usage.model_extra or {})["resumed"]
    assert (resumed["after_tokens"], resumed["completion_tokens"]) == (5, CHUNKS - 5)
    # b's prompt (the original one plus a's five tokens) as b counted and reported it
    (asked,) = setup.b.requests[seen:]
    b_prompt = prompt_tokens_of(asked.body)
    assert resumed["prompt_tokens"] == b_prompt
    # a was cut before it reported usage: its prompt is b's count less the five tokens
    a_prompt = b_prompt - 5
    assert usage.prompt_tokens == a_prompt + b_prompt
    # each upstream's prompt and the tokens it delivered, at its own price
    expected = (a_prompt * A_IN + 5 * A_OUT + b_prompt * B_IN + (CHUNKS - 5) * B_OUT) / 1e6
    # the stream's bill is settled (and its access line written) a moment after its end
    assert eventually(lambda: spent(setup) - before == pytest.approx(expected)), (
        spent(setup) - before,
        expected,
    )
    assert eventually(lambda: bool(resumed_lines(setup.gateway))), setup.gateway.log()[-4000:]
    (line,) = resumed_lines(setup.gateway)
    assert line["cost_usd"] == pytest.approx(expected), line


def resumed_lines(gateway: Server) -> list[dict[str, Any]]:
    """The access lines of resumed requests."""
    return [
        record
        for text in gateway.log().splitlines()
        if text.startswith("{") and '"resumed"' in text
        for record in [json.loads(text)]
        if record.get("event") == "request"
    ]
