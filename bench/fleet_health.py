"""Client requests that reach a bad upstream through a fleet: across a worker restart, when a
replica joins, and per down phase of a flapping upstream; this tree and a baseline in the
same sitting.

Each run starts ``shunter serve --workers 2`` on a real ``redis-server`` in front of the
fault-injecting loopback upstream (the test fixture), and sends a steady load: ``--rate``
client requests a second, each on a connection of its own (the kernel spreads them over
the workers), each marked so the upstream can tell client requests from attempts.

* ``restart``: the upstream hangs (every request waits for the deployment's 2 s
  first-token timeout; no health probes, a long cooldown: once open, the fleet holds the
  breaker open). Counted: the client requests that reached it while the first failures
  opened the breaker, in the 6 s after one worker is killed (the supervisor starts another),
  and in the 6 s after a second ``serve --workers 2`` joins on the same Redis (the load
  then goes to it).
* ``flap``: the upstream answers 500 for ``--down`` seconds, then 200 for as long,
  ``--phases`` times; the reliability settings are the defaults (3 failures in a row, one
  retry, 5 s cooldown, probes every 2 s), and again with ``failure_threshold: 2``.
  Counted: the client requests that got a 500 from it in each down phase.

    .venv/bin/python bench/fleet_health.py [--baseline-rev REV] [--rate 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
_marks = itertools.count()


class Fleet:
    """``serve --workers 2`` of ``tree`` on ``redis_url``."""

    def __init__(
        self, tree: Path, config: Path, redis_url: str, log: Path, settle: float = 1.5
    ) -> None:
        from scaling import free_port, wait_for_port

        port = free_port()
        command = [
            sys.executable, "-m", "gateway.cli", "serve", "--config", str(config),
            "--port", str(port), "--workers", "2", "--redis-url", redis_url,
            "--log-level", "warning",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(tree)}
        with log.open("ab") as out:
            self.process = subprocess.Popen(command, cwd=tree, env=env, stdout=out, stderr=out)
        self.url = f"http://127.0.0.1:{port}"
        wait_for_port(port, self.process, 120)
        time.sleep(settle)  # both workers listen (and have ticked once)

    def worker_pids(self) -> list[int]:
        from scaling import children

        return children(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


class Load:
    """``rate`` marked client requests a second at ``url`` (which may change), until stopped;
    on an event loop of its own, so that the upstream in this process keeps its pace."""

    def __init__(self, fleet: Fleet, rate: float) -> None:
        self.url, self.rate = fleet.url, rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        tasks: set[asyncio.Task[None]] = set()
        next_at = time.monotonic()
        while not self._stop.is_set():
            task = asyncio.create_task(_ask(self.url, f"req-{next(_marks)}"))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            next_at += 1.0 / self.rate
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await asyncio.gather(*tasks)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


async def _ask(url: str, mark: str) -> None:
    """One client request on a connection of its own."""
    body = {"model": "m", "messages": [{"role": "user", "content": mark}]}
    with contextlib.suppress(httpx.HTTPError):
        async with httpx.AsyncClient(timeout=30) as client:
            await client.post(f"{url}/v1/chat/completions", json=body)


def reached(upstream: Any, start: float, end: float, fault: str | None) -> int:
    """Client requests (distinct marks) that reached ``upstream`` between two times and
    got ``fault``."""
    marks = {
        r.body["messages"][-1]["content"]
        for r in list(upstream.requests)
        if start <= r.at < end and r.fault == fault and isinstance(r.body, dict)
    }
    return len(marks)


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _config(folder: Path, url: str, reliability: str, probes: bool = True) -> Path:
    path = folder / f"config-{next(_marks)}.yaml"
    health = "" if probes else ", health_check: false"
    path.write_text(
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{url}', model: x{health},\n"
        "     timeouts: {first_token_s: 2, total_s: 4}}\n"
        "models:\n  m: {candidates: [up]}\n"
        f"reliability: {reliability}\n"
    )
    return path


def restart(tree: Path, folder: Path, args: argparse.Namespace) -> dict[str, int]:
    from tests.fixtures.fault_upstream import FaultUpstream
    from tests.redis_server import RedisServer

    redis = RedisServer(_made(folder / f"redis-{next(_marks)}")).start()
    reliability = "{cooldown_s: 120, max_cooldown_s: 120, probe_interval_s: null}"
    out: dict[str, int] = {}
    with FaultUpstream() as upstream:
        upstream.default_fault = "hang"
        config = _config(folder, upstream.url, reliability, probes=False)
        fleet = Fleet(tree, config, redis.url, folder / "restart.log")
        joined = None
        load = Load(fleet, args.rate)
        try:
            start = time.monotonic()
            time.sleep(8.0)
            out["first outage"] = reached(upstream, start, time.monotonic(), "hang")
            os.kill(min(fleet.worker_pids()), signal.SIGKILL)
            start = time.monotonic()
            time.sleep(6.0)
            out["worker restart"] = reached(upstream, start, time.monotonic(), "hang")
            # the load moves to it as soon as it listens: what it serves first counts
            joined = Fleet(tree, config, redis.url, folder / "joined.log", settle=0.0)
            load.url, start = joined.url, time.monotonic()
            time.sleep(6.0)
            out["replica joins"] = reached(upstream, start, time.monotonic(), "hang")
        finally:
            load.stop()
            for server in (fleet, joined):
                if server is not None:
                    server.stop()
            redis.stop()
    return out


def flap(tree: Path, folder: Path, args: argparse.Namespace, threshold: int) -> list[int]:
    from tests.fixtures.fault_upstream import FaultUpstream
    from tests.redis_server import RedisServer

    redis = RedisServer(_made(folder / f"redis-{next(_marks)}")).start()
    with FaultUpstream() as upstream:
        config = _config(folder, upstream.url, f"{{failure_threshold: {threshold}}}")
        fleet = Fleet(tree, config, redis.url, folder / "flap.log")
        load = Load(fleet, args.rate)
        counts = []
        try:
            time.sleep(2.0)
            for _ in range(args.phases):
                upstream.default_fault, start = "500", time.monotonic()
                time.sleep(args.down)
                counts.append(reached(upstream, start, time.monotonic(), "500"))
                upstream.default_fault = None
                time.sleep(args.down)
        finally:
            load.stop()
            fleet.stop()
            redis.stop()
    return counts


def measure(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="fleet-health-"))
    got: dict[str, Any] = dict(restart(tree, folder, args))
    for threshold in (3, 2):
        got[f"flap, threshold {threshold}"] = flap(tree, folder, args, threshold)
    return got


def main() -> None:
    from trees import baseline_tree

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="client requests a second")
    parser.add_argument("--down", type=float, default=6.0, help="seconds down, then up")
    parser.add_argument("--phases", type=int, default=4, help="down phases of the flap")
    parser.add_argument("--baseline-rev", help="a commit, checked out as the baseline")
    parser.add_argument("--baseline", type=Path, help="another checkout, as the baseline")
    args = parser.parse_args()
    runs: dict[str, dict[str, Any]] = {}
    with baseline_tree(args.baseline, args.baseline_rev) as baseline:
        if baseline is not None:
            runs["baseline"] = measure(baseline, args)
        runs["this"] = measure(ROOT, args)
    print(f"client requests that reached the bad upstream, at {args.rate:g} requests/s")
    print(f"{'':<28}" + "".join(f"{name:>24}" for name in runs))
    for row in runs["this"]:
        print(f"{row:<28}" + "".join(f"{got[row]!s:>24}" for got in runs.values()))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
