"""What used to escape a session's limits, through a real `shunter serve` on a real
redis-server in front of a priced loopback upstream: a new session id for every request
(a key starts at most ``sessions.new_per_key`` sessions a window), and a loop the guard
did not see (the same call with ``1`` and ``1.0``, two calls taking turns)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer

MASTER = "sk-master-session-escapes"
NEW_PER_KEY = 5
REPEATS = 3


@pytest.fixture(scope="module")
def server(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("session-escapes")
    config = folder / "shunter.yaml"
    with FaultUpstream() as upstream:
        config.write_text(
            "deployments:\n"
            f"  - name: up\n    backend: openai\n    base_url: '{upstream.url}/v1'\n"
            "    model: fake\n    price: {input_per_1m: 0, output_per_1m: 1000}\n"
            "models:\n  m: {candidates: [up]}\n"
            f"sessions: {{budget_usd: 0.06, loop_guard: {{repeats: {REPEATS}}},"
            f" new_per_key: {NEW_PER_KEY}, new_window_s: 3600}}\n"
        )
        env = {"SHUNTER_REDIS_URL": redis_server.url, "SHUNTER_MASTER_KEY": MASTER}
        started = start_server(config, folder / "server.log", env=env)
        try:
            yield started
        finally:
            stop_server(started)


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


def test_rotating_session_ids_does_not_escape_a_stopped_session(
    redis_server: RedisServer, server: Server
) -> None:
    key = redis_server.create_key("--name", "rotator")
    for _ in range(3):  # the session's budget: $0.06, three answers
        assert chat(server, key, ask("task"), session="agent-0").status_code == 200
    assert chat(server, key, ask("task"), session="agent-0").status_code == 429
    answers = [chat(server, key, ask("task"), session=f"agent-{i}") for i in range(1, 31)]
    statuses = [a.status_code for a in answers]
    print(f"30 new session ids: {statuses.count(200)} served, {statuses.count(429)} refused")
    # agent-0 was the first of the window's five
    assert statuses == [200] * (NEW_PER_KEY - 1) + [429] * (31 - NEW_PER_KEY)
    error = answers[-1].json()["error"]
    assert error["code"] == "session_limit_exceeded"
    assert "sessions.new_per_key" in error["message"] and "rotator" in error["message"]
    assert answers[-1].headers.get("x-should-retry") == "false"
    # a session already started goes on; another key starts its own
    assert chat(server, key, ask("task"), session="agent-1").status_code == 200
    other = redis_server.create_key("--name", "other")
    assert chat(server, other, ask("task"), session="agent-9").status_code == 200


def calls(*steps: tuple[str, str]) -> list[dict[str, Any]]:
    """Assistant turns calling each (name, arguments JSON) in turn, each with its result."""
    turns: list[dict[str, Any]] = []
    for i, (name, arguments) in enumerate(steps):
        function = {"name": name, "arguments": arguments}
        call = {"id": f"c{i}", "type": "function", "function": function}
        turns += [
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "no change"},
        ]
    return turns


def test_the_same_call_written_as_1_and_1_0_is_a_loop(
    redis_server: RedisServer, server: Server
) -> None:
    key = redis_server.create_key("--name", "numbers")
    steps = [("seek", json.dumps({"line": 1 if i % 2 else 1.0})) for i in range(REPEATS)]
    answer = chat(server, key, [*ask("numbers"), *calls(*steps)])
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"]["code"] == "session_loop_detected"


def test_two_calls_taking_turns_are_a_loop(redis_server: RedisServer, server: Server) -> None:
    key = redis_server.create_key("--name", "cycler")
    pair = [("read_file", '{"path": "a.py"}'), ("run_tests", '{"all": true}')]
    below = chat(server, key, [*ask("cycle"), *calls(*(pair * (REPEATS - 1)))])
    assert below.status_code == 200, below.text
    looping = chat(server, key, [*ask("cycle"), *calls(*(pair * REPEATS))])
    assert looping.status_code == 429, looping.text
    error = looping.json()["error"]
    assert error["code"] == "session_loop_detected"
    assert "read_file, run_tests" in error["message"]
