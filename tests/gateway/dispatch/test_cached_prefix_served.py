"""``cached_prefix`` over real engines: two ``shunter worker`` processes (llama.cpp, the
generated tiny GGUF) behind one model, and a spill to a loopback API under an ``slo``.

Agent sessions share their system prompt; each turn resends the history. Follow-up turns
must land on the engine holding their conversation (its worker reports the prefix links
its sequences hold), new sessions must spread, and an engine whose slots and queue are
full is left for the other. Where an ``slo`` says the local engine would answer too late,
the request goes to the API at once and the route says why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Server, free_port, start_server, stop_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn

SYSTEM = "You are a coding agent in a small repository. Read a file before editing it. " * 16
Messages = list[dict[str, Any]]


@contextmanager
def worker(model: Path, folder: Path, name: str, parallel: int, queue: int) -> Iterator[int]:
    """A ``shunter worker`` serving ``model`` as ``w`` on a free port, until the block ends."""
    port = free_port()
    command = [sys.executable, "-m", "gateway.cli", "worker", "--model", str(model), "--name"]
    command += ["w", "--parallel", str(parallel), "--max-queue", str(queue), "--ctx", "4096"]
    command += ["--threads", "1", "--port", str(port)]
    log_path = folder / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ}
        )
    try:
        wait_for(lambda: _ready(port, process, log_path), 60)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=20)


def _ready(port: int, process: subprocess.Popen[bytes], log: Path) -> bool:
    assert process.poll() is None, log.read_text()
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health/readiness", timeout=1).is_success
    except httpx.TransportError:
        return False


def wait_for(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


@contextmanager
def fleet(
    model: Path, folder: Path, parallel: int, queue: int
) -> Iterator[tuple[Server, dict[str, int]]]:
    """Two workers, and a gateway whose model ``agent`` routes over them by prefix."""
    with ExitStack() as stack:
        ports = {
            name: stack.enter_context(worker(model, folder, name, parallel, queue))
            for name in ("w1", "w2")
        }
        rows = "".join(
            f"  - {{name: {name}, backend: openai, base_url: 'http://127.0.0.1:{port}/v1',"
            " model: w, worker_stats: true}\n"
            for name, port in ports.items()
        )
        (folder / "gateway.yaml").write_text(
            f"deployments:\n{rows}models:\n"
            "  agent: {candidates: [w1, w2], policy: [healthy, cached_prefix]}\n"
        )
        gateway = start_server(folder / "gateway.yaml", folder / "gateway.log")
        stack.callback(stop_server, gateway)
        yield gateway, ports


def ask(gateway: Server, messages: Messages, model: str = "agent") -> tuple[str, str, str]:
    """One turn: the deployment that answered, the route reason, the answer."""
    body = {"model": model, "messages": messages, "max_tokens": 4, "temperature": 0}
    response = httpx.post(f"{gateway.api}/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    answer = response.json()["choices"][0]["message"]["content"] or ""
    headers = response.headers
    return headers["x-shunter-deployment"], headers["x-shunter-route"], answer


def session(task: str) -> Messages:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]


def test_follow_up_turns_stay_where_their_prefix_is_and_sessions_spread(
    tiny_model: Path, tmp_path: Path
) -> None:
    with fleet(tiny_model, tmp_path, parallel=3, queue=4) as (gateway, ports):
        sessions = {f"s{i}": session(f"task {i}: fix the failing test") for i in range(3)}
        placed: dict[str, str] = {}
        for turn in range(3):
            for name, messages in sessions.items():
                deployment, route, answer = ask(gateway, messages)
                if turn:
                    assert deployment == placed[name], route
                    assert route.startswith(f"{deployment} by cached_prefix holds ~"), route
                    assert route.split(",")[0].endswith(" home"), route
                placed[name] = deployment
                messages += [
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": f"step {turn}: run the tests again"},
                ]
        assert set(placed.values()) == {"w1", "w2"}, placed
        figures = httpx.get(f"http://127.0.0.1:{ports['w1']}/v1/worker/stats").json()
        held = figures["deployments"]["w"]["held_prefixes"]
        assert held and all(isinstance(depth, int) and depth > 0 for depth in held.values())


def test_a_saturated_engine_is_left_for_the_other(tiny_model: Path, tmp_path: Path) -> None:
    stop = threading.Event()
    holders: list[threading.Thread] = []
    with fleet(tiny_model, tmp_path, parallel=1, queue=1) as (gateway, ports):
        messages = session("task: rename a function")
        home, _, answer = ask(gateway, messages)
        messages.append({"role": "assistant", "content": answer})
        other = "w2" if home == "w1" else "w1"
        # the conversation's own side work keeps its engine busy (and its prefix held)
        side = [*messages, {"role": "user", "content": "count to a thousand"}]
        long = {"model": "w", "messages": side, "max_tokens": 3000, "stream": True}
        url = f"http://127.0.0.1:{ports[home]}/v1/chat/completions"
        for _ in range(2):  # its one sequence busy, its one queue place taken
            holders.append(threading.Thread(target=_hold, args=(url, long, stop), daemon=True))
            holders[-1].start()
        wait_for(lambda: _full(gateway, home), 20)
        messages.append({"role": "user", "content": "go on"})
        deployment, route, _ = ask(gateway, messages)
        stop.set()
    for holder in holders:  # the workers are gone: a stream still waiting has ended
        holder.join(timeout=30)
    assert deployment == other, route
    assert f"cached_prefix: left {home} (holds ~" in route, route


def _hold(url: str, body: dict[str, Any], stop: threading.Event) -> None:
    """Keep a streamed request open until ``stop`` (or its worker is gone)."""
    try:
        with httpx.stream("POST", url, json=body, timeout=60) as stream:
            for _ in stream.iter_lines():
                if stop.is_set():
                    return
    except httpx.HTTPError:
        return


def _full(gateway: Server, name: str) -> bool:
    """The gateway's view (a worker is polled every second) of ``name``: full."""
    body = httpx.get(f"{gateway.base_url}/health/readiness").json()
    figures = body["deployments"][name]
    return bool(figures["slots_busy"] == 1 and figures["queue_depth"] == 1)


def test_predicted_too_slow_locally_spills_to_the_api_at_once(
    tiny_model: Path, tmp_path: Path
) -> None:
    upstream = ScriptedUpstream(script=[Turn(text="from the api")])
    with upstream:
        (tmp_path / "config.yaml").write_text(
            f"""
deployments:
  - {{name: local, backend: llamacpp, model: {tiny_model}, n_ctx: 4096, threads: 1,
     parallel: 1, max_queue: 8}}
  - {{name: api, backend: openai, base_url: '{upstream.url}', model: scripted}}
models:
  agent:
    candidates: [local, api]
    policy: [healthy, {{slo: {{ttft_ms: 800}}}}, cached_prefix]
  direct: {{candidates: [local]}}
"""
        )
        gateway = start_server(tmp_path / "config.yaml", tmp_path / "gateway.log")
        try:
            _spill(gateway, upstream)
        finally:
            stop_server(gateway)


def _spill(gateway: Server, upstream: ScriptedUpstream) -> None:
    messages = session("task: add a test")
    deployment, route, answer = ask(gateway, messages)
    assert deployment == "local" and not upstream.bodies, route
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "more"}]
    long = {"model": "direct", "messages": session("count"), "max_tokens": 3000, "stream": True}
    with httpx.stream("POST", f"{gateway.api}/chat/completions", json=long, timeout=60) as held:
        assert held.status_code == 200
        # its one sequence taken: the next waits for it (a second at least, by the one
        # request it has seen finish), more than the target
        wait_for(lambda: _busy(gateway, "local"), 10)
        deployment, route, answer = ask(gateway, messages)
    assert (deployment, answer) == ("api", "from the api"), route
    assert len(upstream.bodies) == 1
    assert "spill: predicted ttft " in route and " ms > slo 800 ms on local" in route, route
    status = httpx.get(f"{gateway.base_url}/ui/status.json").json()
    routes = [d["route"] for d in status["decisions"] if d["deployment"] == "api"]
    assert routes and "spill: predicted ttft" in routes[0], routes


def _busy(gateway: Server, name: str) -> bool:
    body = httpx.get(f"{gateway.base_url}/health/readiness").json()
    return bool(body["deployments"][name]["slots_busy"] == 1)
