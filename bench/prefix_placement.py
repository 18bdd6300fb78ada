"""Agent sessions over two ``shunter worker``s: how much of each prompt was cached, by policy.

One command, one machine, a generated demo model, two workers behind one gateway::

    .venv/bin/python -m bench.prefix_placement [--sessions 6 --turns 5 --size tiny]

Each session is an agent conversation: a long system prompt every session shares, then a
turn at a time (the answer and a tool's output of about 1,200 characters appended, the whole history
resent), the
sessions running side by side. Each policy gets fresh workers (empty KV caches) and a fresh
gateway; ``default`` has no policy line (the default two interchangeable workers get).
Reported per policy: the share of prompt tokens the engines served from their KV cache
(``usage.prompt_tokens_details.cached_tokens``), in all and of follow-up turns, the most
any placement could serve from cache of follow-up turns (``of max``: the turn before's
prompt and answer; the new messages are prefilled wherever a turn goes), the
follow-ups that went to the engine of the session's turn before (it holds their history),
mean and p90 turn latency, and where each session's first turn went; ratios are against
``affinity`` (else the first row run). Then the route of every follow-up that moved. Not a
test: latencies depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gateway.models.demo import write_demo_model

SYSTEM = "You are a coding agent in a repository. Read files before editing them. " * 40
POLICIES: dict[str, str | None] = {
    "default": None,  # no policy line: the default two interchangeable workers get
    "affinity": "[healthy, affinity]",
    "least_loaded": "[healthy, least_loaded]",
    "cached_prefix": "[healthy, cached_prefix]",
}


@dataclass
class Tally:
    prompt: int = 0
    cached: int = 0
    latencies: list[float] = field(default_factory=list)
    placed: Counter[str] = field(default_factory=Counter)
    homes: dict[int, list[str]] = field(default_factory=dict)
    """Each session's deployment, turn by turn."""
    moves: list[str] = field(default_factory=list)
    """The route reason of each follow-up that went to another engine than the turn before."""
    follow_prompt: int = 0
    follow_cached: int = 0
    follow_ceiling: int = 0
    """Of follow-up prompt tokens, those any engine could have held: the turn before's prompt
    and answer (the rest, the new messages, is prefilled wherever the turn goes)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sessions_per_engine(self) -> dict[str, int]:
        """Where each session's first turn went."""
        return dict(sorted(Counter(turns[0] for turns in self.homes.values()).items()))

    def stayed(self) -> tuple[int, int]:
        """Follow-up turns on the engine of the turn before (it holds their history), of all."""
        pairs = [(a, b) for turns in self.homes.values() for a, b in itertools.pairwise(turns)]
        return sum(a == b for a, b in pairs), len(pairs)


def _port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def _process(command: list[str], url: str, log: Path) -> Iterator[None]:
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{command[3]} did not start:\n{log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/health/readiness", timeout=1).is_success:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextmanager
def _fleet(model: Path, folder: Path, policy: str | None, parallel: int) -> Iterator[str]:
    with ExitStack() as stack:
        rows = []
        for name in ("w1", "w2"):
            port = _port()
            command = [sys.executable, "-m", "gateway.cli", "worker", "--model", str(model)]
            command += ["--name", "w", "--parallel", str(parallel), "--ctx", "16384"]
            command += ["--threads", "1", "--port", str(port)]
            url = f"http://127.0.0.1:{port}"
            stack.enter_context(_process(command, url, folder / f"{name}.log"))
            rows.append(
                f"  - {{name: {name}, backend: openai, base_url: '{url}/v1', model: w,"
                " worker_stats: true}\n"
            )
        config = folder / "gateway.yaml"
        line = "" if policy is None else f", policy: {policy}"
        config.write_text(
            f"deployments:\n{''.join(rows)}models:\n  agent: {{candidates: [w1, w2]{line}}}\n"
        )
        port = _port()
        command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
        url = f"http://127.0.0.1:{port}"
        stack.enter_context(_process([*command, "--port", str(port)], url, folder / "gw.log"))
        yield url


def _session(url: str, index: int, turns: int, tally: Tally) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"task {index}: make the test suite pass"},
    ]
    held = 0  # the tokens of the turn before: its prompt and its answer
    with httpx.Client(timeout=120) as client:
        for turn in range(turns):
            body = {"model": "agent", "messages": messages, "max_tokens": 16, "temperature": 0}
            started = time.perf_counter()
            response = client.post(f"{url}/v1/chat/completions", json=body)
            elapsed = time.perf_counter() - started
            response.raise_for_status()
            answer = response.json()
            usage = answer["usage"]
            details = usage.get("prompt_tokens_details") or {}
            cached = details.get("cached_tokens") or 0
            deployment = response.headers["x-shunter-deployment"]
            with tally.lock:
                tally.prompt += usage["prompt_tokens"]
                tally.cached += cached
                tally.latencies.append(elapsed)
                tally.placed[deployment] += 1
                placed = tally.homes.setdefault(index, [])
                if placed and placed[-1] != deployment:
                    tally.moves.append(response.headers["x-shunter-route"])
                placed.append(deployment)
                if turn:
                    tally.follow_prompt += usage["prompt_tokens"]
                    tally.follow_cached += cached
                    tally.follow_ceiling += min(held, usage["prompt_tokens"])
            held = usage["prompt_tokens"] + usage["completion_tokens"]
            messages += [
                {"role": "assistant", "content": answer["choices"][0]["message"]["content"]},
                {"role": "user", "content": f"step {turn}: the tests say\n" + _output(index, turn)},
            ]


def _output(session: int, turn: int) -> str:
    """A tool's output of about 1,200 characters, different per session and turn."""
    return "".join(f"FAILED tests/test_{session}_{turn}.py::test_{i} - AssertionError\n"
                   for i in range(24))  # fmt: skip


def run(model: Path, policy: str | None, sessions: int, turns: int, parallel: int) -> Tally:
    tally = Tally()
    with (
        tempfile.TemporaryDirectory() as folder,
        _fleet(model, Path(folder), policy, parallel) as url,
    ):
        threads = [
            threading.Thread(target=_session, args=(url, i, turns, tally)) for i in range(sessions)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--parallel", type=int, default=4, help="sequences per worker")
    parser.add_argument("--size", choices=["tiny", "bench"], default="tiny")
    parser.add_argument("--only", help="comma-separated policy names (default: all)")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(POLICIES)
    with tempfile.TemporaryDirectory() as folder:
        model = write_demo_model(Path(folder) / f"{args.size}.gguf", args.size)
        results = {
            name: run(model, policy, args.sessions, args.turns, args.parallel)
            for name, policy in POLICIES.items()
            if name in chosen
        }
    base = results.get("affinity") or next(iter(results.values()))
    base_share = base.cached / max(base.prompt, 1)
    print(f"{args.sessions} sessions x {args.turns} turns, 2 workers x {args.parallel} seqs")
    print(
        f"{'policy':<14} {'cached':>7} {'vs aff':>7} {'follow':>7} {'of max':>7} {'stayed':>7} "
        f"{'mean s':>7} {'p90 s':>7}  sessions per engine"
    )
    for name, tally in results.items():
        share = tally.cached / max(tally.prompt, 1)
        follow = tally.follow_cached / max(tally.follow_prompt, 1)
        ceiling = tally.follow_ceiling / max(tally.follow_prompt, 1)
        stayed, follow_ups = tally.stayed()
        p90 = statistics.quantiles(tally.latencies, n=10)[-1]
        mean = statistics.mean(tally.latencies)
        ratio = share / base_share if base_share else float("nan")
        print(
            f"{name:<14} {share:>7.1%} {ratio:>6.2f}x {follow:>7.1%} {ceiling:>7.1%} "
            f"{f'{stayed}/{follow_ups}':>7} {mean:>7.3f} {p90:>7.3f}  "
            f"{tally.sessions_per_engine()}"
        )
    for name, tally in results.items():
        for reason in tally.moves:
            print(f"{name} moved: {reason}")


if __name__ == "__main__":
    main()
