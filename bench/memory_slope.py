"""Memory under traffic, per request type: what a gateway worker keeps per request of each
kind, with the collector's counts, for this tree and a baseline in the same sitting.

A real ``shunter serve`` (on a real ``redis-server``, as a fleet runs it: stored responses,
conversations and session books live there) fronts loopback upstreams (the test fixtures)
and a real stdio MCP server. The kinds of traffic:

* ``chat``, ``chat_stream``: chat completions, whole and streamed;
* ``responses``: ``POST /v1/responses`` (stored); ``responses_ws``: one turn on a WebSocket
  of its own (``GET /v1/responses`` upgraded);
* ``conversations``: a conversation created, then a response in it;
* ``failing``: an upstream that answers 500 (the breaker kept closed: every request fails
  on it); ``cut``: a stream cut mid-way with nowhere to resume (an in-band error);
  ``resumed``: a stream cut mid-way and resumed on another deployment;
* ``hosted``: a response whose model calls a tool of the MCP server (two model calls);
* ``idle``: no requests for as long as a batch of chat takes (what time alone adds).

The gateway runs under this script's ``traced-serve`` launcher: on ``SIGUSR1`` each worker
writes its resident memory and the collector's counts (collections and objects collected
per generation), then collects in full and writes what was freed, the objects the
collector tracks and the bytes ``tracemalloc`` still sees (tracing from the first signal
on). After a warm-up of every kind, each kind runs its own warm-up batch, then
``--batches`` batches of ``--requests`` requests with a snapshot after each. The figures
per request of a kind are least-squares slopes over its snapshots:

* ``kept B``: traced bytes still held after a full collection (what grows without bound
  shows here; bounded caches fill here too, so read it with ``obj``);
* ``obj``: objects the collector tracks, after the full collection;
* ``RSS B``: resident memory (noisy: allocator pools, pages first touched);
* ``cyc``: objects only the snapshot's full collection freed, per request (reference
  cycles a request leaves for the collector); ``gc0/1/2``: automatic collections per
  1,000 requests, by generation.

    .venv/bin/python bench/memory_slope.py [--requests 400] [--batches 4] [--baseline-rev REV]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
KINDS = (
    "chat", "chat_stream", "responses", "responses_ws", "conversations",
    "failing", "cut", "resumed", "hosted", "idle",
)  # fmt: skip
Facts = dict[int, dict[str, Any]]  # per worker pid


# --- inside the gateway ----------------------------------------------------------------


def traced_serve(tree: Path, out: Path, frames: int, argv: list[str]) -> int:
    """``shunter serve argv`` of ``tree``, with the SIGUSR1 snapshot handler (the workers of
    ``--workers N`` inherit it across the fork)."""
    sys.path.insert(0, str(tree))
    from gateway.cli import main as shunter

    taken = collections.Counter[int]()

    def snapshot(signum: int, frame: object) -> None:
        pid = os.getpid()
        taken[pid] += 1
        stats = gc.get_stats()
        facts: dict[str, Any] = {
            "rss": _rss_kb(pid) * 1024,
            "collections": [s["collections"] for s in stats],
            "collected": [s["collected"] for s in stats],
            "cyclic": gc.collect(),
            "objects": len(gc.get_objects()),
            "kept": tracemalloc.get_traced_memory()[0],
        }
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(str(out / f"{pid}-{taken[pid]}.snap"))
        else:
            tracemalloc.start(frames)
        (out / f"{pid}-{taken[pid]}.json").write_text(json.dumps(facts))

    signal.signal(signal.SIGUSR1, snapshot)
    return shunter(["serve", *argv])


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# --- the traffic -------------------------------------------------------------------------


def _text(n: int) -> str:
    return f"question {n}: {os.urandom(8).hex()}"


async def _chat(client: httpx.AsyncClient, n: int, model: str = "plain") -> None:
    body = {"model": model, "messages": [{"role": "user", "content": _text(n)}]}
    await client.post("/v1/chat/completions", json=body)


async def _stream(client: httpx.AsyncClient, n: int, model: str = "plain") -> None:
    body = {"model": model, "messages": [{"role": "user", "content": _text(n)}], "stream": True}
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        async for _ in response.aiter_lines():
            pass


async def _responses(client: httpx.AsyncClient, n: int) -> None:
    await client.post("/v1/responses", json={"model": "plain", "input": _text(n)})


async def _socket(client: httpx.AsyncClient, n: int) -> None:
    import websockets

    url = str(client.base_url).replace("http://", "ws://") + "/v1/responses"
    async with websockets.connect(url, max_size=None) as socket:
        turn = {"type": "response.create", "model": "plain", "input": _text(n)}
        await socket.send(json.dumps(turn))
        async for raw in socket:
            if json.loads(raw).get("type") in ("response.completed", "error"):
                break


async def _conversation(client: httpx.AsyncClient, n: int) -> None:
    made = (await client.post("/v1/conversations", json={})).json()
    body = {"model": "plain", "input": _text(n), "conversation": made["id"]}
    await client.post("/v1/responses", json=body)


async def _hosted(client: httpx.AsyncClient, n: int) -> None:
    tool = {"type": "mcp", "server_label": "local", "require_approval": "never"}
    await client.post("/v1/responses", json={"model": "agent", "input": _text(n), "tools": [tool]})


DRIVERS: dict[str, Callable[[httpx.AsyncClient, int], Awaitable[None]]] = {
    "chat": _chat,
    "chat_stream": _stream,
    "responses": _responses,
    "responses_ws": _socket,
    "conversations": _conversation,
    "failing": lambda client, n: _chat(client, n, "failing"),
    "cut": lambda client, n: _stream(client, n, "cut"),
    "resumed": lambda client, n: _stream(client, n, "resumed"),
    "hosted": _hosted,
}


async def drive(url: str, kind: str, count: int, concurrency: int) -> float:
    """``count`` requests of ``kind``, ``concurrency`` at a time; the seconds they took."""
    started = time.monotonic()
    left = iter(range(count))
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:

        async def lane() -> None:
            for n in left:
                await DRIVERS[kind](client, n)

        await asyncio.gather(*(lane() for _ in range(concurrency)))
    return time.monotonic() - started


# --- the gateway ---------------------------------------------------------------------------


class TracedGateway:
    """``tree``'s gateway under ``traced-serve``: its workers and their snapshots."""

    def __init__(self, tree: Path, folder: Path, extra: list[str], workers: int) -> None:
        from scaling import free_port

        self.folder, self.workers, self.taken = folder, workers, 0
        port = free_port()
        command = [sys.executable, str(Path(__file__).resolve()), "traced-serve", str(tree)]
        command += [str(folder), "1", "--port", str(port), *extra]
        with (folder / "server.log").open("wb") as log:
            self.process = subprocess.Popen(command, cwd=tree, stdout=log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited:\n{(folder / 'server.log').read_text()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/health/readiness", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("gateway not ready")

    def pids(self) -> list[int]:
        from scaling import children

        return [self.process.pid] if self.workers == 1 else children(self.process.pid)

    def snapshot(self) -> Facts:
        """What every worker holds now (waits until each has written it)."""
        self.taken += 1
        pids = self.pids()
        for pid in pids:
            os.kill(pid, signal.SIGUSR1)
        facts: Facts = {}
        for pid in pids:
            done = self.folder / f"{pid}-{self.taken}.json"
            while not done.exists() or not done.read_text().endswith("}"):
                time.sleep(0.05)
            facts[pid] = json.loads(done.read_text())
        return facts

    def sites(self, first: int, last: int, top: int) -> list[str]:
        """The allocation lines whose held bytes grew most from snapshot ``first`` to
        ``last``, over every worker."""
        sizes: collections.Counter[str] = collections.Counter()
        for pid in self.pids():
            old, new = (self.folder / f"{pid}-{i}.snap" for i in (first, last))
            if not (old.exists() and new.exists()):
                return []
            diff = tracemalloc.Snapshot.load(str(new)).compare_to(
                tracemalloc.Snapshot.load(str(old)), "lineno"
            )
            for stat in diff:
                frame = stat.traceback[0]
                sizes[f"{frame.filename}:{frame.lineno}"] += stat.size_diff
        return [f"{size:>+11,} B  {site}" for site, size in sizes.most_common(top)]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- the figures ---------------------------------------------------------------------------


def _sum(facts: Facts, field: str, index: int | None = None) -> float:
    if index is None:
        return float(sum(f[field] for f in facts.values()))
    return float(sum(f[field][index] for f in facts.values()))


def figures(snaps: list[Facts], requests: int) -> dict[str, float]:
    """Per request of a kind, over its snapshots: the slopes of what stayed, the cycles it
    left, the automatic collections per 1,000 requests (the snapshots' own collections
    taken out)."""
    xs = [float(i * requests) for i in range(len(snaps))]

    def slope(field: str) -> float:
        return statistics.linear_regression(xs, [_sum(s, field) for s in snaps]).slope

    total = requests * (len(snaps) - 1)
    forced = [0, 0, (len(snaps) - 1) * len(snaps[0])]  # gc.collect() counts as a gen 2 pass
    out = {"kept": slope("kept"), "objects": slope("objects"), "rss": slope("rss")}
    out["cyclic"] = sum(_sum(s, "cyclic") for s in snaps[1:]) / total
    for gen in range(3):
        ran = _sum(snaps[-1], "collections", gen) - _sum(snaps[0], "collections", gen)
        out[f"gc{gen}"] = (ran - forced[gen]) * 1000 / total
    return out


HEADS = ("kept B", "obj", "RSS B", "cyc", "gc0", "gc1", "gc2")
FIELDS = ("kept", "objects", "rss", "cyclic", "gc0", "gc1", "gc2")


def table(results: dict[str, dict[str, Any]]) -> list[str]:
    lines = [f"{'kind':<15}" + "".join(f"{h:>9}" for h in HEADS)]
    for kind, got in results.items():
        cells = [f"{got[f]:>9.1f}" for f in FIELDS]
        lines.append(f"{kind:<15}" + "".join(cells))
    return lines


# --- the upstreams and the run -------------------------------------------------------------


def tool_upstream() -> Any:
    """A chat upstream whose model calls the MCP server's ``echo`` once per response: it
    answers a conversation that ends with a tool result in words, any other with the call."""
    from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn, _send, _whole

    class ToolCaller(ScriptedUpstream):
        async def answer(
            self, request_line: str, headers: dict[str, str], body: bytes, *rest: Any
        ) -> None:
            writer = rest[-1]
            if not request_line.startswith("POST"):
                await _send(writer, "application/json", b'{"object": "list", "data": []}')
                return
            messages = json.loads(body).get("messages") or [{}]
            called = messages[-1].get("role") == "tool"
            turn = Turn(text="done") if called else Turn(calls=(("local__echo", '{"text": "hi"}'),))
            await _send(writer, "application/json", json.dumps(_whole(turn)).encode())

    return ToolCaller()


def write_config(folder: Path, fault: str, tools: str) -> Path:
    from tests.fixtures.mcp_servers import stdio_command

    config = {
        "deployments": [
            {"name": "a", "backend": "openai", "base_url": fault, "model": "fault:cut:5"},
            {"name": "b", "backend": "openai", "base_url": fault, "model": "up-b"},
            {"name": "bad", "backend": "openai", "base_url": fault, "model": "fault:500"},
            {"name": "tools", "backend": "openai", "base_url": tools, "model": "scripted"},
        ],
        "models": {
            "plain": {"candidates": ["b"]},
            "resumed": {"candidates": ["a", "b"], "policy": ["first"]},
            "cut": {"candidates": ["a"]},
            "failing": {"candidates": ["bad"]},
            "agent": {"candidates": ["tools"]},
        },
        "mcp": {"servers": {"local": {"command": stdio_command(), "timeout_s": 20}}},
        # the failing deployments must stay in their routes: their breakers never open
        "reliability": {"failure_threshold": 1_000_000_000, "retries": 0},
    }
    path = folder / "shunter.yaml"
    path.write_text(json.dumps(config))
    return path


async def measure(tree: Path, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every kind's figures for ``tree``'s gateway (fresh upstreams and Redis of its own)."""
    from tests.fixtures.fault_upstream import FaultUpstream
    from tests.redis_server import RedisServer

    folder = Path(tempfile.mkdtemp(prefix="memory-slope-"))
    redis = RedisServer(folder).start()
    try:
        with FaultUpstream() as fault, tool_upstream() as tools:
            extra = ["--config", str(write_config(folder, fault.url, tools.url))]
            extra += ["--log-level", "warning", "--redis-url", redis.url]
            extra += ["--workers", str(args.workers)]
            gateway = TracedGateway(tree, folder, extra, args.workers)
            try:
                return await _kinds(gateway, args, fault)
            finally:
                gateway.stop()
    finally:
        redis.stop()


async def _kinds(gateway: TracedGateway, args: argparse.Namespace, fault: Any) -> dict[str, Any]:
    kinds = [k for k in KINDS if k in args.kinds]
    for kind in kinds:
        if kind != "idle":
            await drive(gateway.url, kind, args.warmup, args.concurrency)
    gateway.snapshot()  # tracing starts here
    results: dict[str, dict[str, Any]] = {}
    took: list[float] = []
    for kind in kinds:
        if kind != "idle":
            await drive(gateway.url, kind, args.warmup, args.concurrency)
        first, snaps = gateway.taken + 1, [gateway.snapshot()]
        for _ in range(args.batches):
            if kind == "idle":
                await asyncio.sleep(statistics.mean(took or [5.0]))
            else:
                seconds = await drive(gateway.url, kind, args.requests, args.concurrency)
                took += [seconds] if kind == "chat" else []
            fault.requests.clear()  # the fixture's own records, not the gateway's
            snaps.append(gateway.snapshot())
        results[kind] = figures(snaps, args.requests)
        results[kind]["sites"] = gateway.sites(first, gateway.taken, args.top)
    return results


def report(args: argparse.Namespace, runs: dict[str, dict[str, dict[str, Any]]]) -> None:
    print(
        f"{args.requests} requests a batch, {args.batches} batches after a warm-up of "
        f"{args.warmup}, {args.workers} worker(s), {args.concurrency} at a time; per request:"
    )
    for name, results in runs.items():
        print(f"\n{name}")
        print("\n".join(table(results)))
    if len(runs) == 2:
        this, base = runs["this"], runs["baseline"]
        print("\nkept bytes per request, this against the baseline:")
        for kind in this:
            print(f"{kind:<15}{this[kind]['kept']:>9.1f}{base[kind]['kept']:>9.1f}")
    for name, results in runs.items():
        for kind, got in results.items():
            if got["sites"] and got["kept"] > args.show_above:
                print(f"\n{name}, {kind}: the lines that held most more at the end")
                print("\n".join(got["sites"]))


def main() -> None:
    from trees import baseline_tree

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per batch")
    parser.add_argument("--batches", type=int, default=4, help="measured batches per kind")
    parser.add_argument("--warmup", type=int, default=200, help="requests of a kind first")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    parser.add_argument("--top", type=int, default=8, help="allocation lines shown")
    parser.add_argument("--show-above", type=float, default=20.0, help="kept B/request")
    parser.add_argument("--baseline-rev", help="a commit, checked out as the baseline")
    parser.add_argument("--baseline", type=Path, help="another checkout, as the baseline")
    args = parser.parse_args()
    args.kinds = args.kinds.split(",")
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    with baseline_tree(args.baseline, args.baseline_rev) as baseline:
        if baseline is not None:
            runs["baseline"] = asyncio.run(measure(baseline, args))
        runs["this"] = asyncio.run(measure(ROOT, args))
    report(args, runs)


if __name__ == "__main__":
    if len(sys.argv) > 4 and sys.argv[1] == "traced-serve":
        sys.exit(traced_serve(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]))
    sys.path.insert(0, str(ROOT))
    main()
