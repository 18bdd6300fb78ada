"""Cascades on real processes: `shunter serve` (keys and spend in a real redis-server) in
front of two loopback upstreams, a small one whose answers are sure or unsure on demand
and a large one, driven by the openai SDK."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from openai import OpenAI

from gateway.admission.keys import KeyRing
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.gateway.dispatch.judged_upstream import JudgedUpstream
from tests.redis_server import RedisServer, start_redis

SMALL_TEXT = "small answer one two three four five."
LARGE_TEXT = "large answer one two three four five."


@dataclass(frozen=True)
class Setup:
    server: Server
    small: JudgedUpstream
    large: JudgedUpstream
    redis: RedisServer
    key: str
    key_scope: str


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("cascade")
    redis = start_redis(tmp_path_factory.mktemp("cascade-redis"))
    key, scope = asyncio.run(_budgeted_key(redis.url))
    with JudgedUpstream("small") as small, JudgedUpstream("large") as large:
        config = folder / "shunter.yaml"
        config.write_text(
            "deployments:\n"
            f"  - {{name: large, backend: openai, base_url: '{large.url}', model: l,\n"
            "     params_b: 70, price: {input_per_1m: 10, output_per_1m: 30}}\n"
            f"  - {{name: small, backend: openai, base_url: '{small.url}', model: s,\n"
            "     params_b: 1.5, price: {input_per_1m: 1, output_per_1m: 2}}\n"
            "models:\n"
            "  chat:\n"
            "    candidates: [large, small]\n"
            "    policy: [healthy, capable, smallest]\n"
            "    cascade: {min_confidence: 0.6}\n"
            "  peek:\n"
            "    candidates: [large, small]\n"
            "    policy: [healthy, smallest]\n"
            "    cascade: {min_confidence: 0.6, judge_tokens: 4}\n"
            "  strict:\n"
            "    candidates: [small, large]\n"
            "    cascade: {min_confidence: 0.6, scorer: {quantile: 0}}\n"
            "  plain: {candidates: [small]}\n"
        )
        env = {"SHUNTER_REDIS_URL": redis.url}
        server = start_server(config, folder / "server.log", env=env)
        try:
            yield Setup(server, small, large, redis, key, scope)
        finally:
            stop_server(server)
            redis.stop()


async def _budgeted_key(url: str) -> tuple[str, str]:
    store = RedisStateStore.from_url(url, prefix="shunter")
    try:
        secret, record = await KeyRing(store).create("cascade", budget_usd=10.0)
        return secret, f"key:{record.id}"
    finally:
        await store.aclose()


def client(setup: Setup) -> OpenAI:
    return OpenAI(base_url=setup.server.api, api_key=setup.key, max_retries=0, timeout=30)


def ask(mark: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"What is it? {mark}"}]


def test_a_sure_answer_is_served_by_the_small_deployment(setup: Setup) -> None:
    before = len(setup.large.bodies)
    with client(setup) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(model="chat", messages=ask("[sure]"))
    answer = raw.parse()
    assert answer.choices[0].message.content == SMALL_TEXT
    assert raw.headers["x-shunter-deployment"] == "small"
    assert raw.headers["x-shunter-route"].startswith("cascade small 0.99>=0.60; small by")
    assert answer.choices[0].logprobs is None  # asked for the judge, not for the client
    assert setup.small.bodies[-1]["logprobs"] is True
    assert len(setup.large.bodies) == before
    assert answer.usage is not None and answer.usage.completion_tokens == 8


def test_an_unsure_answer_is_served_by_the_large_one_and_both_are_billed(setup: Setup) -> None:
    spent = asyncio.run(_spend(setup))
    with client(setup) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(model="chat", messages=ask("[unsure]"))
    answer = raw.parse()
    assert answer.choices[0].message.content == LARGE_TEXT
    assert raw.headers["x-shunter-deployment"] == "large"
    assert raw.headers["x-shunter-route"].startswith("cascade small 0.14<0.60 -> large; ")
    assert "logprobs" not in setup.large.bodies[-1]  # the last step is not judged
    assert answer.usage is not None and answer.usage.total_tokens == 18  # the served answer
    # both answers: 10 + 8 tokens each; small $1/$2 per 1M, large $10/$30 per 1M
    small_usd, large_usd = (10 * 1 + 8 * 2) / 1e6, (10 * 10 + 8 * 30) / 1e6
    assert raw.headers["x-shunter-cascade-usage"] == (
        f"prompt_tokens=20, completion_tokens=16, cost_usd={small_usd + large_usd:.8f}"
    )
    assert asyncio.run(_spend(setup)) - spent == pytest.approx(small_usd + large_usd)


async def _spend(setup: Setup) -> float:
    store = RedisStateStore.from_url(setup.redis.url, prefix="shunter")
    try:
        return (await store.spend_get(setup.key_scope, 30 * 86400)).usd
    finally:
        await store.aclose()


def _stream(setup: Setup, model: str, mark: str, **extra: object) -> tuple[httpx.Headers, list]:
    with (
        client(setup) as sdk,
        sdk.chat.completions.with_streaming_response.create(
            model=model, messages=ask(mark), stream=True, **extra
        ) as raw,
    ):
        return raw.headers, list(raw.parse())


def test_an_unsure_stream_carries_only_the_large_answer(setup: Setup) -> None:
    headers, chunks = _stream(setup, "chat", "[unsure]", stream_options={"include_usage": True})
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == LARGE_TEXT
    assert "small" not in text
    assert {c.id for c in chunks} == {"id-chat.completion.chunk"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert sum(1 for c in chunks if c.choices and c.choices[0].finish_reason) == 1
    assert headers["x-shunter-deployment"] == "large"
    assert headers["x-shunter-route"].startswith("cascade small 0.14<0.60 -> large")
    assert headers["x-shunter-cascade-usage"].endswith(" before the served answer")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8


def test_a_sure_stream_is_the_small_answer_without_logprobs(setup: Setup) -> None:
    headers, chunks = _stream(setup, "chat", "[sure]")
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == SMALL_TEXT
    assert all(c.choices[0].logprobs is None for c in chunks)
    assert headers["x-shunter-deployment"] == "small"


def test_a_client_that_asks_for_logprobs_gets_them(setup: Setup) -> None:
    with client(setup) as sdk:
        answer = sdk.chat.completions.create(model="chat", messages=ask("[sure]"), logprobs=True)
    content = answer.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == 8
    _, chunks = _stream(setup, "chat", "[sure]", logprobs=True)
    assert (
        sum(len(c.choices[0].logprobs.content or []) for c in chunks if c.choices[0].logprobs) == 8
    )


def test_judge_tokens_commits_on_a_sure_start_and_escalates_an_unsure_one(setup: Setup) -> None:
    # sure for four tokens, then not: judged whole it escalates, on four tokens it streams
    headers, chunks = _stream(setup, "peek", "[late]")
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == SMALL_TEXT
    assert headers["x-shunter-route"].startswith("cascade small 0.99>=0.60")
    headers, chunks = _stream(setup, "chat", "[late]")
    assert headers["x-shunter-deployment"] == "large"
    headers, chunks = _stream(setup, "peek", "[unsure]")
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == LARGE_TEXT
    assert headers["x-shunter-route"].startswith("cascade small 0.14<0.60 -> large")


def test_tool_calls_are_judged_on_their_arguments(setup: Setup) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    with client(setup) as sdk:
        unsure = sdk.chat.completions.with_raw_response.create(
            model="chat",
            messages=ask("[tool]"),
            tools=tools,  # type: ignore[arg-type]
        )
        sure = sdk.chat.completions.with_raw_response.create(
            model="chat",
            messages=ask("[tool-sure]"),
            tools=tools,  # type: ignore[arg-type]
        )
    # the whole call text averages 0.77 (its JSON is near-certain); "Paris" alone is 0.08
    assert unsure.headers["x-shunter-route"].startswith("cascade small 0.08<0.60 -> large")
    assert sure.headers["x-shunter-deployment"] == "small"
    call = sure.parse().choices[0].message.tool_calls[0]  # type: ignore[index]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]


def test_the_quantile_scorer_judges_the_least_likely_token(setup: Setup) -> None:
    with client(setup) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(model="strict", messages=ask("[late]"))
    assert raw.headers["x-shunter-route"].startswith("cascade small 0.05<0.60 -> large")


def test_cascade_outcomes_are_counted(setup: Setup) -> None:
    metrics = httpx.get(f"{setup.server.base_url}/metrics", timeout=10).text
    lines = [x for x in metrics.splitlines() if x.startswith("shunter_cascade_steps_total")]
    served = [x for x in lines if 'outcome="served"' in x and 'deployment="small"' in x]
    escalated = [x for x in lines if 'outcome="escalated"' in x and 'model="chat"' in x]
    assert served and float(served[0].rsplit(" ", 1)[1]) >= 1
    assert escalated and float(escalated[0].rsplit(" ", 1)[1]) >= 1
    # the answers the small step gave and lost count in its token metrics too
    small_steps = sum(_value(x) for x in lines if 'model="chat"' in x and 'deployment="small"' in x)
    answered = sum(
        _value(line)
        for line in metrics.splitlines()
        if line.startswith("gen_ai_client_token_usage_count")
        and 'model="chat"' in line
        and 'deployment="small"' in line
        and 'gen_ai_token_type="output"' in line
    )
    failed = sum(
        _value(x)
        for x in lines
        if 'model="chat"' in x and 'deployment="small"' in x and 'outcome="failed"' in x
    )
    assert answered >= small_steps - failed > 0


def _value(line: str) -> float:
    return float(line.rsplit(" ", 1)[1])


def test_a_model_without_cascade_asks_for_no_logprobs(setup: Setup) -> None:
    with client(setup) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(model="plain", messages=ask("[sure]"))
    assert "logprobs" not in setup.small.bodies[-1]
    assert not raw.headers["x-shunter-route"].startswith("cascade")
    assert "x-shunter-cascade-usage" not in raw.headers


def test_a_small_step_that_fails_leaves_the_answer_to_the_large_one(setup: Setup) -> None:
    with client(setup) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(model="chat", messages=ask("[down]"))
    assert raw.parse().choices[0].message.content == LARGE_TEXT
    assert raw.headers["x-shunter-route"].startswith("cascade small failed -> large; large after")
    # a stream cut while it is being judged: nothing was sent, so the large one answers
    headers, chunks = _stream(setup, "chat", "[cut]")
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == LARGE_TEXT
    assert headers["x-shunter-route"].startswith("cascade small failed -> large")
