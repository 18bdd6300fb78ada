"""What a gateway worker keeps per stream it served: resumed streams against plain ones,
measured in one sitting, and where the memory that stayed was allocated.

A real ``shunter serve`` (``--workers 2``: on a real ``redis-server``) fronts two
fault-injecting upstreams on loopback (the test fixture): ``a`` cuts every stream after
``--at`` chunks, ``b`` answers whole and continues what it is given. Model ``resumed``
routes ``a`` then ``b`` (every stream fails over mid-way and is continued on ``b``);
model ``plain`` routes ``b`` then ``a`` (the same resumable streams, never cut). Every
request is its own conversation, in one session.

The gateway runs under this script's ``traced-serve`` launcher: on ``SIGUSR1`` each worker
writes what it holds (RSS, traced bytes and a ``tracemalloc`` snapshot from the first
signal on) *before* collecting garbage, as a long-running worker holds it (the server
runs the collector rarely), then runs a full collection and writes what it freed. After
a warm-up the streams go in batches (plain, then resumed ``--batches`` times), a
snapshot after each. Per stream of a batch:

* ``kept``: traced bytes still held after a full collection (bounded caches fill here);
* ``cyclic``: traced bytes, and ``objects``, that only the collection freed: reference
  cycles, which a worker holds until its collector gets to them (the automatic collector
  is off from the first snapshot on, so this counts all a batch left, not what happened
  to be left since the last automatic pass); the bytes include the free lists a full
  collection empties, a constant per snapshot (with no cycles, ``objects`` is 0);
* ``RSS``: the workers' resident memory (noisy: allocator pools, the first batches' pages).

Read the ratio of resumed to plain: the machine is noisy, the ratio less so. The sites
that grew most over the last batch follow.

    .venv/bin/python -m bench.stream_memory [--streams 2000] [--workers 2] [--frames 8]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
Snapshots = tuple[tracemalloc.Snapshot, tracemalloc.Snapshot] | None  # held, then kept
Taken = dict[int, tuple[Snapshots, dict[str, Any]]]


# --- inside the gateway ----------------------------------------------------------------


def traced_serve(out: Path, frames: int, argv: list[str]) -> int:
    """``shunter serve argv`` with the SIGUSR1 snapshot handler (the workers of
    ``--workers N`` inherit it across the fork)."""
    from gateway.cli import main as shunter

    taken = collections.Counter[int]()

    def snapshot(signum: int, frame: object) -> None:
        pid = os.getpid()
        taken[pid] += 1
        stem = out / f"{pid}-{taken[pid]}"
        facts: dict[str, Any] = {"rss_kb": _rss_kb(pid)}
        held = tracemalloc.get_traced_memory()[0]
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(f"{stem}.snap")
        facts["cyclic_objects"] = gc.collect()
        facts["kept"] = tracemalloc.get_traced_memory()[0]
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(f"{stem}.kept.snap")
        facts["cyclic_bytes"] = held - facts["kept"]
        if not tracemalloc.is_tracing():  # from the first snapshot on: what a batch left
            tracemalloc.start(frames)  # is what reference counting alone could free;
            gc.disable()  # the rest waits for this handler's full collection
        Path(f"{stem}.json").write_text(json.dumps(facts))

    signal.signal(signal.SIGUSR1, snapshot)
    return shunter(["serve", *argv])


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# --- the client ------------------------------------------------------------------------


async def _one(client: httpx.AsyncClient, url: str, model: str, n: int) -> bool:
    messages = [{"role": "user", "content": f"question {n}: {os.urandom(8).hex()}"}]
    body = {"model": model, "messages": messages, "stream": True}
    # one session for all: the session books (bounded by their own cap) stay as they are
    headers = {"x-shunter-session": "stream-memory"}
    resumed = False
    async with client.stream("POST", url, json=body, headers=headers) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            resumed = resumed or line.startswith(": resumed")
    return resumed


async def _batch(url: str, model: str, count: int, concurrency: int) -> int:
    """``count`` streams of ``model``, ``concurrency`` at a time; how many were resumed."""
    left = iter(range(count))
    resumed = 0
    async with httpx.AsyncClient(timeout=60) as client:

        async def lane() -> None:
            nonlocal resumed
            for n in left:
                was_resumed = await _one(client, url, model, n)
                resumed += was_resumed

        await asyncio.gather(*(lane() for _ in range(concurrency)))
    return resumed


class TracedGateway:
    """The gateway under ``traced-serve``: its workers and their snapshots."""

    def __init__(self, folder: Path, frames: int, extra: list[str], workers: int) -> None:
        from tests.conftest import free_port

        self.folder, self.workers, self.taken = folder, workers, 0
        port = free_port()
        command = [sys.executable, str(Path(__file__).resolve()), "traced-serve"]
        command += [str(folder), str(frames), "--port", str(port), *extra]
        with (folder / "server.log").open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited:\n{(folder / 'server.log').read_text()}")
            try:
                if httpx.get(f"{self.url}/health/readiness", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("gateway not ready")

    def pids(self) -> list[int]:
        if self.workers == 1:
            return [self.process.pid]
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(p) for p in children.read_text().split()]

    def snapshot(self) -> Taken:
        """What every worker holds now (waits until each has written it)."""
        self.taken += 1
        pids = self.pids()
        for pid in pids:
            os.kill(pid, signal.SIGUSR1)
        taken: Taken = {}
        for pid in pids:
            stem = self.folder / f"{pid}-{self.taken}"
            done = Path(f"{stem}.json")
            while not done.exists() or not done.read_text().endswith("}"):
                time.sleep(0.1)
            held, kept = Path(f"{stem}.snap"), Path(f"{stem}.kept.snap")
            loaded = None
            if held.exists():
                loaded = tracemalloc.Snapshot.load(str(held)), tracemalloc.Snapshot.load(str(kept))
            taken[pid] = (loaded, json.loads(done.read_text()))
        return taken

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


# --- the figures -------------------------------------------------------------------------


def _total(taken: Taken, field: str) -> int:
    return sum(facts[field] for _, facts in taken.values())


def per_stream(before: Taken, after: Taken, streams: int) -> dict[str, float]:
    """What one stream of the batch between two snapshots left held: bytes kept after a
    full collection, bytes and objects only that collection freed, resident bytes."""
    return {
        "kept": (_total(after, "kept") - _total(before, "kept")) / streams,
        "cyclic": _total(after, "cyclic_bytes") / streams,
        "objects": _total(after, "cyclic_objects") / streams,
        "rss": (_total(after, "rss_kb") - _total(before, "rss_kb")) * 1024 / streams,
    }


def grown_sites(before: Taken, after: Taken, top: int) -> list[str]:
    """The allocation lines that held most at the end of a batch (before the collection)
    over what was kept at its start, over every worker."""
    sizes: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for pid, (snaps, _) in after.items():
        old = before[pid][0]
        if snaps is None or old is None:
            return []
        for diff in snaps[0].compare_to(old[1], "lineno"):
            frame = diff.traceback[0]
            name = frame.filename
            site = f"{Path(name).relative_to(ROOT) if name.startswith(str(ROOT)) else name}"
            sizes[f"{site}:{frame.lineno}"] += diff.size_diff
            counts[f"{site}:{frame.lineno}"] += diff.count_diff
    return [f"{size:>+12,} B {counts[s]:>+8} blocks  {s}" for s, size in sizes.most_common(top)]


def report(args: argparse.Namespace, batches: list[tuple[str, Taken]]) -> None:
    print(f"{args.streams} streams a batch, {args.workers} worker(s), a cut after {args.at} chunks")
    print("bytes per stream: kept after a full collection, cyclic (freed only by one),")
    print("their sum against the plain batch's, cyclic objects, and resident memory")
    heads = ("kept B", "cyclic B", "sum", "ratio", "objects", "RSS B")
    print(f"{'batch':<26}" + "".join(f"{h:>10}" for h in heads))
    plain: float | None = None
    for (_, before), (name, after) in itertools.pairwise(batches):
        got = per_stream(before, after, args.streams)
        held = got["kept"] + got["cyclic"]
        plain = held if plain is None else plain
        ratio = f"{held / plain:.1f}x" if plain > 0 else "-"
        figures = (got["kept"], got["cyclic"], held)
        print(
            f"{name:<26}"
            + "".join(f"{f:>10,.0f}" for f in figures)
            + f"{ratio:>10}{got['objects']:>10.1f}{got['rss']:>10,.0f}"
        )
    sites = grown_sites(batches[-2][1], batches[-1][1], args.top)
    if sites:
        print("\nallocation lines that held most over the last batch:")
        print("\n".join(sites))


# --- the run -----------------------------------------------------------------------------


def write_config(folder: Path, a: str, b: str, at: int) -> Path:
    config = folder / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: a, backend: openai, base_url: '{a}', model: 'fault:cut:{at}'}}\n"
        f"  - {{name: b, backend: openai, base_url: '{b}', model: up-b}}\n"
        "models:\n"
        "  resumed: {candidates: [a, b], policy: [first]}\n"
        "  plain: {candidates: [b, a], policy: [first]}\n"
        # a fails every stream it is asked: its breaker must not take it out of the route
        "reliability: {failure_threshold: 1000000000}\n"
    )
    return config


async def run(args: argparse.Namespace) -> None:
    from tests.fixtures.fault_upstream import FaultUpstream
    from tests.redis_server import RedisServer

    folder = Path(tempfile.mkdtemp(prefix="stream-memory-"))
    redis = RedisServer(folder).start() if args.workers > 1 else None
    with FaultUpstream() as a, FaultUpstream() as b:
        extra = ["--config", str(write_config(folder, a.url, b.url, args.at))]
        extra += ["--log-level", "warning"]
        if redis is not None:
            extra += ["--workers", str(args.workers), "--redis-url", redis.url]
        gateway = TracedGateway(folder, args.frames, extra, args.workers)
        try:
            url, shape = f"{gateway.url}/v1/chat/completions", (args.streams, args.concurrency)
            for model in ("plain", "resumed"):
                await _batch(url, model, args.warmup, args.concurrency)
            gateway.snapshot()  # tracing starts here
            batches = [("start", gateway.snapshot())]
            for model in ("plain", *["resumed"] * args.batches):
                resumed = await _batch(url, model, *shape)
                a.requests.clear(), b.requests.clear()  # the fixture's own records
                batches.append((f"{model} ({resumed} resumed)", gateway.snapshot()))
            report(args, batches)
        finally:
            gateway.stop()
            if redis is not None:
                redis.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000, help="streams per batch")
    parser.add_argument("--batches", type=int, default=2, help="batches of resumed streams")
    parser.add_argument("--warmup", type=int, default=300, help="streams of each kind first")
    parser.add_argument("--workers", type=int, default=1, help="gateway workers (2+: Redis)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--at", type=int, default=5, help="chunks a delivers before its cut")
    parser.add_argument("--frames", type=int, default=1, help="stack frames traced")
    parser.add_argument("--top", type=int, default=10, help="allocation lines shown")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if len(sys.argv) > 3 and sys.argv[1] == "traced-serve":
        sys.exit(traced_serve(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]))
    main()
