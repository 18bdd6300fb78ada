"""A rolling restart behind a gateway, with and without the drain handoff, in one sitting.

Two ``shunter worker`` processes (``--parallel 4``, one thread each) behind ``shunter
serve`` with the default policy for interchangeable engines (``cached_prefix``; the
gateway moves KV where that pays). Agent sessions are replayed concurrently: each has its
own long system prompt, and each turn resends the history with the previous answer and a
new question, a short pause after the answer. A third of the way through, worker ``w0`` is
restarted (SIGTERM, wait for it to exit, start it again on its port); two thirds through,
``w1``. Run twice on fresh processes:

* ``handoff``: workers with ``--handoff-s 15``: a draining worker's held sequences move to
  its peer before it exits;
* ``no handoff``: ``--handoff-s 0``: a draining worker exits after its streams, its caches
  lost;
* ``no restart``: the control, the same replay with neither worker restarted.

Printed per run: follow-up TTFT p50 and p95 (turns after the first, streamed, at the
client), follow-up cache hit (cached / prompt tokens of follow-up turns, the engines'
``usage``), and the KV moves the gateway made (``/ui/status.json``).

    .venv/bin/python -m bench.kv_move --rolling [--quick]
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gateway.models.demo import ensure_demo_model
from tests.conftest import Server, free_port, start_server, stop_server


@dataclass(frozen=True)
class Plan:
    """The replay's size."""

    sessions: int
    turns: int
    system_words: int
    model: str


QUICK = Plan(sessions=4, turns=6, system_words=400, model="tiny")
FULL = Plan(sessions=8, turns=9, system_words=900, model="bench")


@dataclass
class Turn:
    session: int
    index: int
    ttft_s: float
    prompt: int
    cached: int


@dataclass
class Run:
    label: str
    turns: list[Turn] = field(default_factory=list)
    moves: dict[str, Any] = field(default_factory=dict)


class Worker:
    """One ``shunter worker`` on a fixed port, restartable."""

    def __init__(self, model: Path, port: int, log: Path, handoff_s: float) -> None:
        self.model, self.port, self.log, self.handoff_s = model, port, log, handoff_s
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "gateway.cli", "worker", "--model", str(self.model)]
        command += ["--name", "w", "--parallel", "4", "--ctx", "8192", "--threads", "1"]
        command += ["--port", str(self.port), "--handoff-s", str(self.handoff_s)]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while not self._fingerprinted():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{self.log.read_text()}")
            time.sleep(0.1)

    def _fingerprinted(self) -> bool:
        try:
            stats = httpx.get(f"{self.base}/v1/worker/stats", timeout=2).json()
        except (httpx.TransportError, ValueError):
            return False
        return bool(stats["deployments"]["w"].get("kv_fingerprint"))

    def restart(self) -> float:
        """SIGTERM, wait for the exit, start again; the seconds it was draining."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)
        drained = time.monotonic() - started
        self.start()
        return drained

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)


def _words(seed: int, count: int) -> str:
    draw = random.Random(seed)
    return " ".join(f"w{draw.randrange(5000)}" for _ in range(count))


def _ask(gateway: Server, messages: list[dict[str, str]]) -> tuple[float, str, int, int]:
    """One streamed turn: TTFT, the answer, prompt and cached tokens."""
    body = {"model": "agent", "messages": messages, "max_tokens": 12, "temperature": 0}
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    started, first, text, usage = time.perf_counter(), None, [], None
    with httpx.stream(
        "POST", f"{gateway.api}/chat/completions", json=body, timeout=600
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = httpx.Response(200, content=line[6:]).json()
            for choice in chunk.get("choices") or []:
                if first is None:
                    first = time.perf_counter() - started
                text.append((choice.get("delta") or {}).get("content") or "")
            if chunk.get("usage"):
                usage = chunk["usage"]
    assert first is not None and usage is not None
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return first, "".join(text), usage["prompt_tokens"], cached


def _session(gateway: Server, plan: Plan, index: int, gates: list[threading.Event], run: Run):
    """One agent session's turns; turn ``t`` waits for ``gates[t]`` (the restarts)."""
    system = f"You are agent {index}. " + _words(index, plan.system_words)
    messages = [{"role": "system", "content": system}]
    for turn in range(plan.turns):
        gates[turn].wait()
        messages.append({"role": "user", "content": f"step {turn}: " + _words(turn, 12)})
        ttft, answer, prompt, cached = _ask(gateway, messages)
        run.turns.append(Turn(index, turn, ttft, prompt, cached))
        messages.append({"role": "assistant", "content": answer})
        time.sleep(0.3)


def one_run(
    model: Path, plan: Plan, folder: Path, handoff_s: float, label: str, restart: bool = True
) -> Run:
    folder.mkdir(parents=True, exist_ok=True)
    workers = [Worker(model, free_port(), folder / f"w{i}.log", handoff_s) for i in range(2)]
    run = Run(label)
    gateway = None
    try:
        for w in workers:
            w.start()
        rows = "".join(
            f"  - {{name: w{i}, backend: openai, base_url: '{w.base}/v1', model: w,"
            " worker_stats: true}\n"
            for i, w in enumerate(workers)
        )
        (folder / "gateway.yaml").write_text(
            f"deployments:\n{rows}models:\n  agent: {{candidates: [w0, w1]}}\n"
        )
        gateway = start_server(folder / "gateway.yaml", folder / "gateway.log")
        gates = [threading.Event() for _ in range(plan.turns)]
        threads = [
            threading.Thread(target=_session, args=(gateway, plan, i, gates, run), daemon=True)
            for i in range(plan.sessions)
        ]
        for thread in threads:
            thread.start()
        restarts = {plan.turns // 3: workers[0], 2 * plan.turns // 3: workers[1]}
        if not restart:
            restarts = {}
        for turn in range(plan.turns):
            if turn in restarts:
                _wait_turns(run, plan.sessions * turn)
                drained = restarts[turn].restart()
                print(f"  {label}: restarted {restarts[turn].base} (drained in {drained:.1f} s)")
            gates[turn].set()
        for thread in threads:
            thread.join(timeout=600)
        status = httpx.get(f"{gateway.base_url}/ui/status.json", timeout=10).json()
        run.moves = status["kv_moves"]
    finally:
        if gateway is not None:
            stop_server(gateway)
        for w in workers:
            w.stop()
    return run


def _wait_turns(run: Run, count: int) -> None:
    deadline = time.monotonic() + 600
    while len(run.turns) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def report(run: Run) -> str:
    follow = [t for t in run.turns if t.index > 0]
    ttfts = sorted(t.ttft_s * 1000 for t in follow)
    p50 = statistics.median(ttfts)
    p95 = ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))]
    hit = sum(t.cached for t in follow) / max(sum(t.prompt for t in follow), 1)
    moved = sum(p["moved"] for p in run.moves.get("pairs", []))
    failed = sum(p["failed"] for p in run.moves.get("pairs", []))
    megabytes = sum(p["bytes"] for p in run.moves.get("pairs", [])) / 1e6
    drains = sum(1 for m in run.moves.get("recent", []) if m["cause"] == "drain")
    return (
        f"| {run.label:10} | {p50:8.0f} | {p95:8.0f} | {hit:6.1%} | {moved:3} ({drains} drain) "
        f"| {failed:3} | {megabytes:7.1f} |"
    )


def main(quick: bool) -> None:
    plan = QUICK if quick else FULL
    path = ensure_demo_model(Path(tempfile.gettempdir()) / f"shunter-{plan.model}.gguf", plan.model)
    folder = Path(tempfile.mkdtemp(prefix="kv-rolling-"))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    print(
        f"{plan.sessions} sessions x {plan.turns} turns on demo:{plan.model}, "
        f"each worker restarted once; logs in {folder}"
    )
    runs = [
        one_run(path, plan, folder / "handoff", 15.0, "handoff"),
        one_run(path, plan, folder / "no-handoff", 0.0, "no handoff"),
        one_run(path, plan, folder / "no-restart", 15.0, "no restart", restart=False),
    ]
    print("| run        | TTFT p50 | TTFT p95 | hit    | moves       | failed | MB moved |")
    print("|---|---|---|---|---|---|---|")
    for run in runs:
        print(report(run))
