"""How the gateway's cost grows with the work: prompt size, fleet size, stream length,
response size, and worker processes.

Run from the repository root::

    python bench/scaling.py                         # this tree only
    python bench/scaling.py --baseline /tmp/base    # and another checkout, same sitting

Each point starts ``shunter serve`` from a source tree, pinned to CPU 0, in front of a
small upstream (``bench/scaling_peers.py``: one process, pinned with the load generator to
CPU 1; it answers from memory). The figure is the gateway's CPU time per request (all its
threads, from ``/proc/<pid>/task/*/schedstat``), the median of ``--repeats`` runs; the
trees alternate point by point so that a busy machine slows both alike. The table gives
each tree's figures, the ratio, and the slopes: ms per MB of prompt, µs per deployment,
µs per relayed chunk, ms per MB of response. ``--plot out.svg`` draws them.

Streams are swept twice: ``chunks`` has the upstream write one chunk per write (a
token-by-token server: every chunk is its own read and its own write to the client), and
``burst`` the whole stream in one write (a static file; the frames arrive together). The
``floor`` column is a relay that only forwards each upstream read to its client, measured
in the same sitting: what a chunk costs in the event loop and the kernel before any
gateway work; the gateway's own cost per chunk is its slope less the floor's.

``fleetd`` sweeps the fleet under the policy a model gets when its config names none, and
``log`` runs one request shape at ``--log-level warning`` and ``info`` (the access log):
the cost of the log is the ratio of the two. ``--baseline-rev REV`` checks a commit out
for the run and measures it alongside, point by point.

The workers sweep reports throughput (requests per second at 64 connections) with 1 and
2 workers, and the gateway's CPU per request in each; it needs Redis (``--redis-url``) and
says so when absent. On a 2-core machine the upstream and the load generator share the
second core with the second worker: their CPU per request is printed too, and the ratio
is a floor, not the scaling a machine with spare cores shows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scaling_peers import load, run_relay, run_upstream
from scaling_plot import plot
from trees import baseline_tree

KB = 1024
ROOT = Path(__file__).resolve().parent.parent
FIVE_STEPS = "[healthy, capable, fits_memory, {slo: {ttft_ms: 5000}}, cheapest]"


# --- the gateway -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cpu_ns(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that just ended
                total += int((task / "schedstat").read_text().split()[0])
    return total


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def wait_for_port(port: int, process: subprocess.Popen[bytes], limit_s: float = 60) -> None:
    """Wait until ``process`` listens on ``port``; ``RuntimeError`` if it exits first."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with status {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listened on port {port} within {limit_s} s")


@dataclass
class Gateway:
    process: subprocess.Popen[bytes]
    port: int
    pids: list[int]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_gateway(tree: Path, config: str, cpus: str, extra: list[str]) -> Gateway:
    folder = Path(tempfile.mkdtemp(prefix="scaling-"))
    path = folder / "shunter.yaml"
    path.write_text(config)
    port = free_port()
    command = [
        "taskset", "-c", cpus, sys.executable, "-m", "gateway.cli", "serve",
        "--config", str(path), "--port", str(port), "--log-level", "warning", *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree), "SHUNTER_MASTER_KEY": "sk-bench"}
    log = (folder / "gateway.log").open("wb")
    process = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=log)
    try:
        wait_for_port(port, process)
    except RuntimeError:
        raise RuntimeError((folder / "gateway.log").read_text()) from None
    time.sleep(0.5)
    pids = children(process.pid) if "--workers" in extra else [process.pid]
    return Gateway(process, port, pids)


def fleet_config(
    upstream: int, deployments: int, policy: str | None, size: int, chunks: int, burst=False
) -> str:
    """``deployments`` alike, one model over them all; ``policy`` None: the default one."""
    base = f"http://127.0.0.1:{upstream}/r{size}/{'b' if burst else 'c'}{chunks}/v1"
    lines = ["deployments:"]
    for i in range(deployments):
        lines.append(
            f"  - {{name: d{i}, backend: openai, base_url: '{base}', model: up, "
            "price: {input_per_1m: 0.15, output_per_1m: 0.6}}"
        )
    names = ", ".join(f"d{i}" for i in range(deployments))
    ruled = "" if policy is None else f", policy: {policy}"
    lines.append(f"models:\n  m: {{candidates: [{names}]{ruled}}}")
    return "\n".join(lines) + "\n"


LINES = {
    # one accented word a line: the whole prompt is then a non-ASCII string, as one
    # accent, emoji or non-Latin name anywhere in a real conversation makes it
    "mixed": "def handler(request): return relay(request, déjà_vu=True)  # a line of code\n",
    "ascii": "def handler(request): return relay(request, deja_vu=True)  # a line of code\n",
}
CONTENT = {"kind": "mixed"}  # --ascii switches it


def _text(size: int) -> str:
    """About ``size`` bytes of code-like UTF-8."""
    line = LINES[CONTENT["kind"]]
    return (line * (size // len(line.encode()) + 1))[: size - size // 80]


def chat_body(prompt_bytes: int, stream: bool) -> bytes:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": _text(prompt_bytes)},
        ],
        "max_tokens": 16,
        "stream": stream,
    }
    return json.dumps(body, ensure_ascii=False).encode()


@dataclass(frozen=True)
class Point:
    sweep: str
    x: float
    label: str
    config: Callable[[int], str]
    body: bytes
    requests: int
    connections: int = 1
    relay_path: str | None = None  # streams: the upstream path a bare relay is measured on
    args: tuple[str, ...] = ()  # more arguments to `shunter serve`


def measure(tree: Path, point: Point, upstream: int, warmup: int) -> float:
    """ms of gateway CPU per request."""
    gateway = start_gateway(tree, point.config(upstream), "0", list(point.args))
    try:
        return cpu_per_request(gateway.port, gateway.pids, point, warmup)
    finally:
        gateway.stop()


def measure_relay(point: Point, upstream: int, warmup: int) -> float:
    """ms of CPU per request of a relay that only forwards each read (the floor)."""
    assert point.relay_path is not None
    port = free_port()
    command = [
        "taskset", "-c", "0", sys.executable, __file__,
        "--relay", str(port), "--upstream", str(upstream), "--relay-path", point.relay_path,
    ]  # fmt: skip
    relay = subprocess.Popen(command)
    try:
        wait_for_port(port, relay)
        return cpu_per_request(port, [relay.pid], point, warmup)
    finally:
        relay.terminate()
        relay.wait()


def cpu_per_request(port: int, pids: list[int], point: Point, warmup: int) -> float:
    """ms of CPU per request of ``pids`` serving ``point`` on ``port``, after a warm-up."""
    load(port, point.body, warmup, point.connections)
    before = cpu_ns(pids)
    load(port, point.body, point.requests, point.connections)
    return (cpu_ns(pids) - before) / point.requests / 1e6


def points(quick: bool) -> list[Point]:
    def plain(n=1, policy: str | None = "[first]", size=200, chunks=20, burst=False):
        return lambda up: fleet_config(up, n, policy, size, chunks, burst)

    scale = 4 if quick else 1
    found = []
    for kb in (1, 32, 256, 1024, 4096):
        requests = max(20, int(3000 / (1 + kb / 16)) // scale)
        found.append(
            Point(
                "prompt", kb / 1024, f"prompt {kb} KB", plain(), chat_body(kb * KB, False), requests
            )
        )
    for n in (1, 10, 100, 1000):
        requests = max(100, int(3000 / (1 + n / 20)) // scale)
        found.append(
            Point("fleet", n, f"{n} deployments", plain(n), chat_body(200, False), requests)
        )
    found.append(
        Point(
            "fleet5",
            1000,
            "1000 deployments, 5 steps",
            plain(1000, FIVE_STEPS),
            chat_body(200, False),
            100 // scale,
        )
    )
    for n in (1, 1000):  # the policy a model gets when its config names none
        requests = max(100, int(3000 / (1 + n / 20)) // scale)
        label = f"{n} deployments, default policy"
        found.append(Point("fleetd", n, label, plain(n, None), chat_body(200, False), requests))
    for level in ("warning", "info"):  # info writes the access log: a line per request
        x, args = float(level == "info"), ("--log-level", level)
        body = chat_body(200, False)
        found.append(Point("log", x, f"log level {level}", plain(), body, 3000 // scale, args=args))
    for burst in (False, True):
        for chunks in (20, 2000):
            requests = max(20, int(2000 / (1 + chunks / (500 if burst else 50))) // scale)
            found.append(
                Point(
                    "burst" if burst else "chunks",
                    chunks,
                    f"{chunks} chunks{', one read' if burst else ''}",
                    plain(chunks=chunks, burst=burst),
                    chat_body(200, True),
                    requests,
                    relay_path=f"/r200/{'b' if burst else 'c'}{chunks}/v1/chat/completions",
                )
            )
    for kb in (1, 256):
        requests = max(50, int(3000 / (1 + kb / 16)) // scale)
        found.append(
            Point(
                "response",
                kb / 1024,
                f"response {kb} KB",
                plain(size=kb * KB),
                chat_body(200, False),
                requests,
            )
        )
    return found  # fmt: skip


def slope(rows: dict[str, list[tuple[float, float]]], sweep: str) -> float | None:
    """Least-squares slope of ms/request over the sweep's x (MB, deployments, chunks)."""
    data = rows.get(sweep, [])
    if len(data) < 2:
        return None
    mx = statistics.fmean(x for x, _ in data)
    my = statistics.fmean(y for _, y in data)
    den = sum((x - mx) ** 2 for x, _ in data)
    return sum((x - mx) * (y - my) for x, y in data) / den if den else None


@dataclass(frozen=True)
class WorkersRun:
    rate: float  # requests per second
    gateway_ms: float  # gateway CPU per request, all workers
    peers_ms: float  # upstream and load generator CPU per request


def workers_sweep(
    tree: Path, redis_url: str, upstream: int, upstream_pid: int, repeats: int
) -> dict[int, list[WorkersRun]]:
    """``repeats`` runs of 1 then 2 workers, in turn (a busy spell slows both alike)."""
    config = fleet_config(upstream, 1, "[first]", 200, 20)
    body = chat_body(200, False)
    result: dict[int, list[WorkersRun]] = {1: [], 2: []}
    for _ in range(repeats):
        for workers in (1, 2):
            extra = ["--redis-url", redis_url] + (["--workers", "2"] if workers == 2 else [])
            gateway = start_gateway(tree, config, "0,1" if workers == 2 else "0", extra)
            try:
                load(gateway.port, body, 1000, 64)
                count = 8000
                peers = [upstream_pid, os.getpid()]
                before, before_peers = cpu_ns(gateway.pids), cpu_ns(peers)
                taken = load(gateway.port, body, count, 64)
                result[workers].append(
                    WorkersRun(
                        count / taken,
                        (cpu_ns(gateway.pids) - before) / count / 1e6,
                        (cpu_ns(peers) - before_peers) / count / 1e6,
                    )
                )
            finally:
                gateway.stop()
    return result


def print_workers(name: str, runs: dict[int, list[WorkersRun]]) -> None:
    """Medians over the runs, and the median of the runs' 2-to-1 ratios."""
    for workers, done in runs.items():
        rate = statistics.median(r.rate for r in done)
        gateway_ms = statistics.median(r.gateway_ms for r in done)
        peers_ms = statistics.median(r.peers_ms for r in done)
        print(
            f"workers {name:<9} {workers}: {rate:7.0f} req/s   gateway {gateway_ms:.3f} ms/req "
            f"({1000 / gateway_ms:5.0f} req/s per gateway core)   upstream and load "
            f"generator {peers_ms:.3f} ms/req"
        )
    ratios = [two.rate / one.rate for one, two in zip(runs[1], runs[2], strict=True)]
    shown = " ".join(f"{r:.2f}" for r in ratios)
    print(f"workers {name:<9} 2/1: {statistics.median(ratios):4.2f}x (runs: {shown})")


Results = dict[str, dict[str, list[tuple[float, float]]]]  # tree -> sweep -> (x, ms)
FLOOR = "floor"


def run_sweeps(trees: dict[str, Path], chosen: list[Point], port: int, repeats: int) -> Results:
    """Measure every point on every tree, alternating trees run by run (and, for streams,
    the bare relay); print each row."""
    results: Results = {t: {} for t in [*trees, FLOOR]}
    ratio = "   ratio" if len(trees) > 1 else ""
    print(f"{'point':<28}" + "".join(f"{t:>14}" for t in trees) + ratio + f"{FLOOR:>14}")
    for point in chosen:
        columns = [*trees, FLOOR] if point.relay_path else [*trees]
        runs: dict[str, list[float]] = {t: [] for t in columns}
        for _ in range(repeats):
            warmup = max(10, point.requests // 10)
            for name in columns:  # alternate: a busy spell slows all alike
                runs[name].append(
                    measure_relay(point, port, warmup)
                    if name == FLOOR
                    else measure(trees[name], point, port, warmup)
                )
        medians = {t: statistics.median(v) for t, v in runs.items()}
        for t, value in medians.items():
            results[t].setdefault(point.sweep, []).append((point.x, value))
        line = f"{point.label:<28}" + "".join(f"{medians[t]:>11.3f} ms" for t in trees)
        if len(trees) > 1:
            line += f"   {medians['baseline'] / medians['this']:5.2f}x"
        if FLOOR in medians:
            line += f"{medians[FLOOR]:>11.3f} ms"
        print(line, flush=True)
    return results


def print_slopes(results: Results) -> None:
    units = {
        "prompt": ("ms per MB of prompt", 1),
        "fleet": ("µs per deployment", 1000),
        "chunks": ("µs per relayed chunk", 1000),
        "burst": ("µs per relayed chunk, one read", 1000),
        "response": ("ms per MB of response", 1),
    }
    print()
    for sweep, (unit, factor) in units.items():
        for tree, sweeps in results.items():
            s = slope(sweeps, sweep)
            if s is not None:
                print(f"slope {sweep:<9} {tree:<9} {s * factor:9.3f} {unit}")
    for tree, sweeps in results.items():
        for sweep, name in (("fleet", "[first]"), ("fleetd", "default policy")):
            fleet = dict(sweeps.get(sweep, []))
            if 1 in fleet and 1000 in fleet:
                print(f"fleet 1000/1 {tree:<9} {fleet[1000] / fleet[1]:6.1f}x  {name}")
        logged = dict(sweeps.get("log", []))
        if len(logged) == 2:
            print(f"access log {tree:<9} {logged[1] / logged[0] - 1:+6.1%} CPU per request")
        own, floor = slope(sweeps, "chunks"), slope(results.get(FLOOR, {}), "chunks")
        if tree != FLOOR and own is not None and floor is not None:
            print(
                f"own per chunk {tree:<9} {(own - floor) * 1000:6.3f} µs (slope less the floor's)"
            )
        prompt = dict(sweeps.get("prompt", []))
        if 1 / 1024 in prompt and 1.0 in prompt:
            print(f"prompt 1MB/1KB {tree:<9} {prompt[1.0] / prompt[1 / 1024]:6.1f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--upstream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--relay", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--relay-path", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the tree measured")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alongside")
    parser.add_argument("--baseline-rev", help="a commit, checked out for the run as the baseline")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--only", help="sweeps: prompt,fleet,fleet5,fleetd,log,chunks,burst,response,workers"
    )
    parser.add_argument("--quick", action="store_true", help="a quarter of the requests")
    parser.add_argument("--ascii", action="store_true", help="prompts of ASCII text only")
    parser.add_argument("--redis-url", help="for the workers sweep")
    parser.add_argument("--plot", type=Path, help="write an SVG of the sweeps")
    args = parser.parse_args()
    if args.relay is not None:
        run_relay(args.relay, args.upstream, args.relay_path)
        return 0
    if args.upstream is not None:
        run_upstream(args.upstream)
        return 0

    CONTENT["kind"] = "ascii" if args.ascii else "mixed"
    with baseline_tree(args.baseline, args.baseline_rev) as baseline:
        trees = {"this": args.tree}
        if baseline is not None:
            trees = {"baseline": baseline, "this": args.tree}
        return run(args, trees)


def run(args: argparse.Namespace, trees: dict[str, Path]) -> int:
    """Every sweep asked for, on every tree, then the slopes (and the workers)."""
    wanted = args.only.split(",") if args.only else None
    port = free_port()
    command = ["taskset", "-c", "1", sys.executable, __file__, "--upstream", str(port)]
    upstream = subprocess.Popen(command)
    os.sched_setaffinity(0, {1})  # the load generator beside the upstream
    try:
        wait_for_port(port, upstream)
        chosen = [p for p in points(args.quick) if wanted is None or p.sweep in wanted]
        results = run_sweeps(trees, chosen, port, args.repeats)
        print_slopes(results)
        if wanted is None or "workers" in wanted:
            if not args.redis_url:
                print("workers: not measured (give --redis-url: workers share state in Redis)")
            for name, tree in trees.items() if args.redis_url else ():
                if not (tree / "gateway" / "http" / "workers.py").exists():
                    print(f"workers {name:<9} (this tree has no --workers)")
                    continue
                runs = workers_sweep(tree, args.redis_url, port, upstream.pid, args.repeats)
                print_workers(name, runs)
        if args.plot:
            plot(args.plot, results)
            print(f"plot: {args.plot}")
    finally:
        upstream.terminate()
        upstream.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
