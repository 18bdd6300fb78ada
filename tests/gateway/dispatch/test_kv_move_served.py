"""A gateway moving conversations' KV caches between two real ``shunter worker`` processes
(llama.cpp, the generated GGUFs): where a request goes to an engine that does not hold
its prefix while a compatible one does, and when a worker drains. Where a move must pay
on its own merits, the engines serve the bench model (125M parameters): on the tiny one a
re-prefill is about as fast as a move, and which wins depends on the machine.

Sessions are started on worker ``w1`` directly (so that it is their home); the gateway
routes their next turns with ``cached_prefix`` over ``w1`` and ``w2``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.models.demo import write_demo_model
from tests.conftest import Server, free_port, start_server, stop_server
from tests.waiting import eventually

Messages = list[dict[str, Any]]


@pytest.fixture(scope="module")
def bench_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("models") / "bench.gguf", "bench")


@contextmanager
def worker(model: Path, folder: Path, name: str, *args: str) -> Iterator[tuple[str, Any]]:
    """A ``shunter worker`` serving ``model`` as ``w``: its URL and its process."""
    port = free_port()
    command = [sys.executable, "-m", "gateway.cli", "worker", "--model", str(model), "--name"]
    command += ["w", "--ctx", "4096", "--threads", "1", "--port", str(port), *args]
    log_path = folder / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ}
        )
    base = f"http://127.0.0.1:{port}"
    try:
        assert eventually(lambda: _fingerprint(base) is not None, 60), log_path.read_text()
        yield base, process
    finally:
        process.terminate()
        process.wait(timeout=30)


def _fingerprint(base: str) -> str | None:
    try:
        found: str | None = _figures(base)["kv_fingerprint"]
    except (httpx.TransportError, KeyError):
        return None
    return found


def _figures(base: str) -> dict[str, Any]:
    answer = httpx.get(f"{base}/v1/worker/stats", timeout=2)
    figures: dict[str, Any] = answer.json()["deployments"]["w"]
    return figures


@contextmanager
def fleet(
    model: Path, folder: Path, parallel: int, home_args: tuple[str, ...] = ()
) -> Iterator[tuple[Server, dict[str, tuple[str, Any]]]]:
    """Workers ``w1`` (with ``home_args``) and ``w2`` of ``parallel`` sequences each (a
    state moves only between engines of as many sequences), and a gateway routing
    ``agent`` over them with ``cached_prefix``."""
    peer_args = ("--parallel", str(parallel))
    home_args = (*peer_args, *home_args)
    with ExitStack() as stack:
        workers = {
            "w1": stack.enter_context(worker(model, folder, "w1", *home_args)),
            "w2": stack.enter_context(worker(model, folder, "w2", *peer_args)),
        }
        rows = "".join(
            f"  - {{name: {name}, backend: openai, base_url: '{base}/v1', model: w,"
            " worker_stats: true}\n"
            for name, (base, _) in workers.items()
        )
        (folder / "gateway.yaml").write_text(
            f"deployments:\n{rows}models:\n"
            "  agent: {candidates: [w1, w2], policy: [healthy, cached_prefix]}\n"
        )
        gateway = start_server(folder / "gateway.yaml", folder / "gateway.log")
        stack.callback(stop_server, gateway)
        yield gateway, workers


def session(topic: str, words: int) -> Messages:
    system = "You are a coding agent. " + " ".join(f"{topic}{i}" for i in range(words))
    return [{"role": "system", "content": system}, {"role": "user", "content": f"fix {topic}"}]


def direct(base: str, messages: Messages) -> dict[str, Any]:
    """One turn sent to a worker itself."""
    body = {"model": "w", "messages": messages, "max_tokens": 8, "temperature": 0}
    answer = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    out: dict[str, Any] = answer.json()
    return out


def via(gateway: Server, messages: Messages) -> tuple[httpx.Response, dict[str, Any]]:
    """One turn through the gateway: the response (its headers) and its body."""
    body = {"model": "agent", "messages": messages, "max_tokens": 8, "temperature": 0}
    answer = httpx.post(f"{gateway.api}/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    out: dict[str, Any] = answer.json()
    return answer, out


def next_turn(messages: Messages, answer: dict[str, Any], text: str) -> Messages:
    said = answer["choices"][0]["message"]["content"] or ""
    return [*messages, {"role": "assistant", "content": said}, {"role": "user", "content": text}]


def _gateway_sees(gateway: Server, name: str, sequences: int) -> bool:
    body = httpx.get(f"{gateway.base_url}/health/readiness", timeout=2).json()
    return bool(body["deployments"][name]["held_sequences"] == sequences)


def _moves(gateway: Server) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(f"{gateway.base_url}/ui/status.json", timeout=5).json()
    return data["kv_moves"]


def test_a_draining_home_hands_its_sessions_to_its_peer(bench_model: Path, tmp_path: Path) -> None:
    """``w1`` holds three sessions and drains: the gateway moves the most recent (``x``) to
    ``w2`` at once (the handoff; ``w2``, whose three sequences hold sessions of its own,
    takes half of them, rounded down: one), ``y``'s next turn is moved with it, and ``z``'s
    next turn, after ``w1`` is gone, fails to move and is prefilled again. Each answers as
    ``w1`` did before the drain."""
    home_args = ("--handoff-s", "60", "--handoff-idle-s", "8")
    with fleet(bench_model, tmp_path, 3, home_args) as (gateway, workers):
        (home, process), (peer, _) = workers["w1"], workers["w2"]
        turns = {}
        for name in ("z", "y", "x"):
            first = session(name, 500)
            turns[name] = next_turn(first, direct(home, first), "and the tests?")
        controls = {name: direct(home, turns[name]) for name in ("z", "y", "x")}
        for name in ("a", "b", "c"):  # w2's own sessions, one in each of its sequences
            direct(peer, session(name, 40))
        assert eventually(lambda: _gateway_sees(gateway, "w1", 3))
        assert eventually(lambda: _gateway_sees(gateway, "w2", 3))

        process.send_signal(signal.SIGTERM)
        # the handoff: the most recent session (x) is on w2 soon, and said so on /ui
        assert eventually(lambda: len(_moves(gateway)["recent"]) == 1)
        (handed,) = _moves(gateway)["recent"]
        assert (handed["source"], handed["target"], handed["cause"]) == ("w1", "w2", "drain")
        assert handed["outcome"] == "moved" and handed["bytes"] > 0

        # y: placed on w2 (w1 drains), its KV moved there first
        hits = _figures(peer)["prefix_hit_tokens"]
        response, moved = via(gateway, turns["y"])
        route = response.headers["x-shunter-route"]
        assert response.headers["x-shunter-deployment"] == "w2", route
        assert "; moved " in route and " MB from w1 in " in route, route
        assert "; re-prefill predicted " in route, route
        assert moved["choices"][0]["message"] == controls["y"]["choices"][0]["message"]
        cached = moved["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > moved["usage"]["prompt_tokens"] // 2
        assert _figures(peer)["prefix_hit_tokens"] - hits == cached

        # w1 exits once nothing more is asked of it
        assert eventually(lambda: process.poll() is not None, 60)
        assert process.returncode == 0

        # x: found cached on w2, where the handoff put it; nothing moved
        response, found = via(gateway, turns["x"])
        route = response.headers["x-shunter-route"]
        assert response.headers["x-shunter-deployment"] == "w2" and "move" not in route, route
        assert found["choices"][0]["message"] == controls["x"]["choices"][0]["message"]
        cached = found["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > found["usage"]["prompt_tokens"] // 2

        # z: w1 is gone; the move fails, the request is served anyway
        response, prefilled = via(gateway, turns["z"])
        route = response.headers["x-shunter-route"]
        assert response.headers["x-shunter-deployment"] == "w2", route
        assert "; move failed: " in route and " from w1 after " in route, route
        assert prefilled["choices"][0]["message"] == controls["z"]["choices"][0]["message"]

        pairs = {(p["source"], p["target"]): p for p in _moves(gateway)["pairs"]}
        assert (pairs["w1", "w2"]["moved"], pairs["w1", "w2"]["failed"]) == (2, 1)
        metrics = httpx.get(f"{gateway.base_url}/metrics").text
        assert 'shunter_kv_moves_total{outcome="moved",source="w1",target="w2"} 2.0' in metrics
    access = gateway.log()
    assert "moved " in access and "move failed: " in access


def test_a_short_conversation_is_not_moved_and_the_route_says_why(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Its re-prefill is cheap: the request goes to the peer without a move."""
    with fleet(tiny_model, tmp_path, 2, ("--handoff-s", "0")) as (gateway, workers):
        (home, process), _ = workers["w1"], workers["w2"]
        first = session("s", 20)
        turn = next_turn(first, direct(home, first), "and then?")
        assert eventually(lambda: _gateway_sees(gateway, "w1", 1))
        process.send_signal(signal.SIGTERM)
        assert eventually(lambda: process.poll() is not None, 60)
        response, _ = via(gateway, turn)
    route = response.headers["x-shunter-route"]
    assert response.headers["x-shunter-deployment"] == "w2", route
    assert "; move skipped: re-prefill of " in route and " tokens is cheap" in route, route


def test_a_peer_with_empty_sequences_takes_every_session_of_a_drain(
    tiny_model: Path, tmp_path: Path
) -> None:
    """``w2`` holds nothing: all three of ``w1``'s sessions move to it when ``w1`` drains,
    and each next turn is served there from cache, with nothing more to move."""
    home_args = ("--handoff-s", "60", "--handoff-idle-s", "2")
    with fleet(tiny_model, tmp_path, 3, home_args) as (gateway, workers):
        (home, process) = workers["w1"]
        turns = {}
        for name in ("p", "q", "r"):
            first = session(name, 500)
            turns[name] = next_turn(first, direct(home, first), "and the tests?")
        assert eventually(lambda: _gateway_sees(gateway, "w1", 3))
        process.send_signal(signal.SIGTERM)
        assert eventually(lambda: process.poll() is not None, 60)
        drained = [m for m in _moves(gateway)["recent"] if m["cause"] == "drain"]
        assert [(m["target"], m["outcome"]) for m in drained] == [("w2", "moved")] * 3
        for name, turn in turns.items():
            response, found = via(gateway, turn)
            route = response.headers["x-shunter-route"]
            assert response.headers["x-shunter-deployment"] == "w2", (name, route)
            assert "move" not in route, route
            assert found["usage"]["prompt_tokens_details"]["cached_tokens"] > 1000
