"""Sessions through a real `shunter serve` on a real redis-server, in front of a priced
loopback upstream: a session over its budget is refused while the key's other sessions
go on, the loop guard stops an agent repeating a tool call on every API, and the status
page and ``/metrics`` show it.

Each answer is 20 tokens at $0.001 a token ($0.02), which is also the most a request may
cost (``max_tokens: 20``): three requests fill the $0.06 budget of a session exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer

MASTER = "sk-master-sessions"
TOKEN_USD = 0.001
REPEATS = 3


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def server(
    redis_server: RedisServer, upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("sessions-served")
    config = folder / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        f"  - name: up\n    backend: openai\n    base_url: '{upstream.url}/v1'\n"
        "    model: fake\n"
        f"    price: {{input_per_1m: 0, output_per_1m: {TOKEN_USD * 1e6:.0f}}}\n"
        "models:\n  m: {candidates: [up]}\n"
        f"sessions: {{budget_usd: 0.06, loop_guard: {{repeats: {REPEATS}}}}}\n"
    )
    env = {"SHUNTER_REDIS_URL": redis_server.url, "SHUNTER_MASTER_KEY": MASTER}
    started = start_server(config, folder / "server.log", env=env)
    yield started
    stop_server(started)


@pytest.fixture(scope="module")
def key(redis_server: RedisServer) -> str:
    return redis_server.create_key("--name", "agents")


def chat(
    server: Server, key: str, messages: list[dict[str, Any]], session: str | None = None
) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    if session is not None:
        headers["x-shunter-session"] = session
    body = {"model": "m", "messages": messages, "max_tokens": 20}
    return httpx.post(f"{server.api}/chat/completions", json=body, headers=headers, timeout=30)


def ask(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_a_session_over_its_budget_is_refused_and_the_others_go_on(
    server: Server, key: str
) -> None:
    served = [chat(server, key, ask("task one"), session="agent-a") for _ in range(3)]
    assert [r.status_code for r in served] == [200, 200, 200]
    refused = chat(server, key, ask("task one"), session="agent-a")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "session_budget_exceeded"
    assert "agent-a" in error["message"] and "$0.06" in error["message"]
    assert refused.headers.get("x-should-retry") == "false"
    # another session of the same key, and the same session id under another key
    assert chat(server, key, ask("task one"), session="agent-b").status_code == 200
    assert chat(server, MASTER, ask("task one"), session="agent-a").status_code == 200


def test_a_conversation_without_an_id_is_one_session(server: Server, key: str) -> None:
    history = ask("a long task")
    for turn in range(3):
        assert chat(server, key, history).status_code == 200
        history = [*history, {"role": "assistant", "content": "ok"}, *ask(f"and {turn}")]
    refused = chat(server, key, history)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "session_budget_exceeded"
    assert chat(server, key, ask("another task")).status_code == 200


def tool_turns(count: int, name: str = "read_file") -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for i in range(count):
        arguments = json.dumps({"path": "src/app.py"})
        turns += [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": "no change"},
        ]
    return turns


def test_the_loop_guard_stops_repeated_tool_calls_on_chat(server: Server, key: str) -> None:
    below = chat(server, key, [*ask("loop on chat"), *tool_turns(REPEATS - 1)])
    assert below.status_code == 200
    looping = chat(server, key, [*ask("loop on chat"), *tool_turns(REPEATS)])
    assert looping.status_code == 429
    error = looping.json()["error"]
    assert error["code"] == "session_loop_detected"
    assert "'read_file'" in error["message"] and f"{REPEATS} times" in error["message"]


def test_the_loop_guard_stops_repeated_tool_use_on_messages(server: Server, key: str) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "loop on messages"}]
    for i in range(REPEATS):
        messages += [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"cmd": "ls"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "x"}],
            },
        ]
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    body = {"model": "m", "max_tokens": 20, "messages": messages}
    answer = httpx.post(f"{server.api}/messages", json=body, headers=headers, timeout=30)
    assert answer.status_code == 429
    data = answer.json()
    assert data["type"] == "error" and data["error"]["type"] == "rate_limit_error"
    assert "'Bash'" in data["error"]["message"]


def test_the_loop_guard_stops_repeated_function_calls_on_responses(
    server: Server, key: str
) -> None:
    items: list[dict[str, Any]] = [{"role": "user", "content": "loop on responses"}]
    for i in range(REPEATS):
        items += [
            {"type": "function_call", "call_id": f"f{i}", "name": "shell", "arguments": '{"a":1}'},
            {"type": "function_call_output", "call_id": f"f{i}", "output": "same"},
        ]
    body = {"model": "m", "input": items, "max_output_tokens": 20, "tools": [SHELL]}
    headers = {"authorization": f"Bearer {key}"}
    answer = httpx.post(f"{server.api}/responses", json=body, headers=headers, timeout=30)
    assert answer.status_code == 429
    assert answer.json()["error"]["code"] == "session_loop_detected"


SHELL = {"type": "function", "name": "shell", "parameters": {"type": "object"}}


def test_a_continued_response_stays_in_its_session(server: Server, key: str) -> None:
    headers = {"authorization": f"Bearer {key}"}
    url = f"{server.api}/responses"
    first = {"model": "m", "input": "chain", "max_output_tokens": 20, "prompt_cache_key": "chain-1"}
    answer = httpx.post(url, json=first, headers=headers, timeout=30)
    assert answer.status_code == 200
    later = {"model": "m", "input": "more", "max_output_tokens": 20}
    for _ in range(2):
        answer = httpx.post(
            url, json={**later, "previous_response_id": answer.json()["id"]}, headers=headers
        )
        assert answer.status_code == 200
    answer = httpx.post(
        url, json={**later, "previous_response_id": answer.json()["id"]}, headers=headers
    )
    assert answer.status_code == 429
    assert "chain-1" in answer.json()["error"]["message"]


def test_the_status_page_and_metrics_show_sessions(server: Server, key: str) -> None:
    chat(server, key, [*ask("loop for the page"), *tool_turns(REPEATS, "grep")])
    master = {"authorization": f"Bearer {MASTER}"}
    rows = httpx.get(f"{server.base_url}/ui/status.json", headers=master).json()["sessions"]
    (spent,) = [r for r in rows if r["label"] == "agent-a" and r["key_name"] == "agents"]
    assert spent["requests"] == 3
    assert spent["spent_usd"] == pytest.approx(0.06)
    assert spent["state"] == "stopped" and spent["stopped_by"] == "budget"
    assert any(r["stopped_by"] == "loop" for r in rows)
    assert rows == sorted(rows, key=lambda r: r["spent_usd"], reverse=True)
    page = httpx.get(f"{server.base_url}/ui/panel", headers=master).text
    assert 'id="sessions"' in page and "agent-a" in page
    metrics = httpx.get(f"{server.base_url}/metrics", headers=master).text
    assert 'shunter_session_stops_total{reason="loop"}' in metrics
    assert 'shunter_session_stops_total{reason="budget"}' in metrics
