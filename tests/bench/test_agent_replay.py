"""The agent replay bench: its workload, its priced API on the wire, and one tiny run
through real workers and a real gateway."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import cast

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from bench.agent_api import ApiProfile, serve
from bench.agent_replay import main
from bench.agent_workload import Shape, count_tokens, in_burst, sessions
from tests.conftest import free_port

SHAPE = Shape(sessions=5, turns=(3, 5), burst_size=2, burst_gap_s=20.0, stagger_s=1.0,
              system_tokens=300, seed=3)  # fmt: skip


def test_the_same_seed_gives_the_same_sessions_and_another_seed_others() -> None:
    assert sessions(SHAPE) == sessions(SHAPE)
    other = sessions(replace(SHAPE, seed=4))
    assert [t.messages for t in other[0].turns] != [t.messages for t in sessions(SHAPE)[0].turns]


def test_every_turn_resends_the_history_and_grows_it() -> None:
    found = sessions(SHAPE)
    system = found[0].turns[0].messages[0]
    for session in found:
        assert 3 <= len(session.turns) <= 5
        for before, after in zip(session.turns, session.turns[1:], strict=False):
            assert after.messages[: len(before.messages)] == before.messages
            # the recorded answer of the turn before, then the tool result and the user
            assert after.messages[len(before.messages)]["role"] == "assistant"
            assert len(after.messages[len(before.messages)]["content"].split()) == before.max_tokens
            assert after.prompt_tokens > before.prompt_tokens
        assert session.turns[0].messages[0] == system  # one system prompt for all


def test_sessions_start_in_bursts_and_requests_in_a_burst_window_count_as_in_burst() -> None:
    found = sessions(SHAPE)
    for session in found:
        start = session.burst * SHAPE.burst_gap_s
        assert start <= session.start_s <= start + SHAPE.stagger_s
    assert sorted(s.burst for s in found) == [0, 0, 1, 1, 2]
    assert in_burst(SHAPE, 20.0 + SHAPE.burst_window_s)
    assert not in_burst(SHAPE, 20.0 + SHAPE.burst_window_s + 0.1)
    assert not in_burst(SHAPE, 60.5)  # after the last burst


@pytest.fixture
async def api() -> AsyncIterator[str]:
    ready, port = asyncio.Event(), free_port()
    task = asyncio.create_task(serve(port, ApiProfile(ttft_ms=50.0, tokens_per_s=500.0), ready))
    await ready.wait()
    yield f"http://127.0.0.1:{port}"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_api_streams_what_was_asked_and_bills_the_bench_count(api: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{api}/v1", api_key="sk-none")
    raw = list(sessions(SHAPE)[0].turns[1].messages)
    messages = cast(list[ChatCompletionMessageParam], raw)
    stream = await client.chat.completions.create(
        model="agent-api", messages=messages, max_tokens=7, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    text, usage = "", None
    async for chunk in stream:
        text += "".join(c.delta.content or "" for c in chunk.choices)
        usage = chunk.usage or usage
    await client.close()
    assert text.split() == ["word"] * 7
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (count_tokens(raw), 7)
    async with httpx.AsyncClient() as http:
        served = (await http.get(f"{api}/stats")).json()
    assert (served["requests"], served["output_tokens"]) == (1, 7)


async def test_the_api_refuses_a_request_without_messages_naming_the_field(api: str) -> None:
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"{api}/v1/chat/completions", json={"model": "agent-api"})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "messages"


def test_the_api_waits_the_same_for_the_same_request_and_differently_for_others() -> None:
    profile = ApiProfile()
    turns = sessions(SHAPE)[0].turns
    first = profile.ttft_s(list(turns[0].messages))
    assert first == profile.ttft_s(list(turns[0].messages))
    assert first != profile.ttft_s(list(turns[1].messages))


def test_a_tiny_replay_keeps_sessions_on_cache_and_skips_what_the_gateway_rejects(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text("in-order: [healthy, first]\nbogus: [healthy, no_such_step]\n")
    out = tmp_path / "replay"
    code = main([
        "--quick", "--model", str(tiny_model), "--sessions", "2", "--turns", "2-2",
        "--system-tokens", "120", "--policies", str(policies), "--out", str(out),
        "--workers", "1", "--no-sim", "--limit-s", "60",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "skipped bogus: the gateway rejects its config" in printed
    assert "no_such_step" in printed
    record = json.loads(out.with_suffix(".json").read_text())
    (row,) = record["policies"]
    assert (row["policy"], row["requests"], row["failed"]) == ("in-order", 4, 0)
    assert row["share"] == {"w0": 1.0}  # `first`: the first engine, nothing spilled
    assert row["spilled"] == 0
    assert row["followup_cache_hit"] > 0  # the second turns found their history in KV
    assert row["worker_cache_hit"] > 0
    assert row["usd"] > 0
    requests = record["runs"][0]["requests"]
    assert all(r["ttft_s"] > 0 and r["deployment"] == "w0" for r in requests)
