"""Engine guard: ``shunter worker`` against llama-server and against an earlier commit.

Run it before a change to the llama.cpp engine, its scheduler or the worker lands, and quote
its table in the change's closing note::

    .venv/bin/python -m bench.engine_guard --llama-server PATH/TO/llama-server \\
        --baseline-rev main

Every system serves the same GGUF (default: the generated ``demo:bench``, 125M q8_0) with 8
sequences and 2 threads, on loopback, all loaded at once and driven in turn: each round runs
every cell (concurrency x whole/stream) on every system, the systems' order rotating from
round to round, so that a shared machine's load falls on all of them alike. Systems:

- ``worker``: ``shunter worker`` from this tree;
- ``base``: ``shunter worker`` from ``--baseline-rev`` (checked out into a temporary git
  worktree, run with that tree first on ``PYTHONPATH``, the same Python);
- ``llama-server``: llama.cpp's own server (``--llama-server`` or ``$SHUNTER_LLAMA_SERVER``),
  a comparator only, never a dependency.

Printed: output tokens/s (median over rounds), TTFT p50 (streamed requests), and the
worker's ratios to llama-server and to the baseline. ``--fail-below R`` exits 1 when the
worker's throughput ratio to either falls below R in any cell. Not a test: the numbers
depend on the machine and its load; only ratios from one sitting mean anything.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bench.llamacpp_batching import drive, free_port, server
from bench.trees import checked_out

SLOTS = 8
THREADS = 2
CTX_PER_SLOT = 2048
MODEL_NAME = "bench"


@dataclass
class Cell:
    """One (system, concurrency, mode) cell, pooled over rounds."""

    rates: list[float] = field(default_factory=list)  # output tok/s of each round
    ttfts: list[float] = field(default_factory=list)  # seconds, every streamed request

    @property
    def tokens_per_s(self) -> float:
        return statistics.median(self.rates)

    @property
    def ttft_ms(self) -> float | None:
        return 1000 * statistics.median(self.ttfts) if self.ttfts else None


@dataclass(frozen=True)
class System:
    name: str
    command: list[str]
    env: dict[str, str] | None = None
    cwd: Path | None = None


def worker_command(model: Path, port: int, threads: int) -> list[str]:
    """``shunter worker`` as both the current and the old layout take it."""
    return [
        *(sys.executable, "-m", "gateway.cli", "worker", "--model", str(model)),
        *("--name", MODEL_NAME, "--parallel", str(SLOTS), "--ctx", str(CTX_PER_SLOT)),
        *("--threads", str(threads), "--port", str(port), "--log-level", "warning"),
    ]


def llama_server_command(binary: str, model: Path, port: int, threads: int) -> list[str]:
    return [
        *(binary, "-m", str(model), "-np", str(SLOTS), "--alias", MODEL_NAME),
        *("-c", str(SLOTS * CTX_PER_SLOT), "-t", str(threads), "-tb", str(threads)),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]


def systems(args: argparse.Namespace, stack: ExitStack) -> list[System]:
    here = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(here)}
    out = [System("worker", worker_command(args.model, 0, args.threads), env, here)]
    if args.baseline_rev:
        tree = stack.enter_context(checked_out(args.baseline_rev, here))
        old_env = {**os.environ, "PYTHONPATH": str(tree)}
        out.append(System("base", worker_command(args.model, 0, args.threads), old_env, tree))
    if args.llama_server:
        command = llama_server_command(args.llama_server, args.model, 0, args.threads)
        out.append(System("llama-server", command))
    return out


def with_port(command: list[str], port: int) -> list[str]:
    at = command.index("--port")
    return [*command[: at + 1], str(port), *command[at + 2 :]]


def start_all(found: list[System], stack: ExitStack, logs: Path) -> dict[str, str]:
    bases: dict[str, str] = {}
    for system in found:
        port = free_port()
        command = with_port(system.command, port)
        print(f"{system.name}: {' '.join(command)}", flush=True)
        bases[system.name] = stack.enter_context(
            server(system.name, command, port, logs, env=system.env, cwd=system.cwd)
        )
        asyncio.run(drive(bases[system.name], MODEL_NAME, 2, 4, 8, False))  # warm-up
    return bases


def measure(args: argparse.Namespace, bases: dict[str, str]) -> dict[tuple[str, int, bool], Cell]:
    cells: dict[tuple[str, int, bool], Cell] = {}
    names = list(bases)
    for round_ in range(args.rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for c in args.concurrency:
            requests = max(args.requests, 2 * c)
            for stream in (False, True):
                for name in order:
                    tokens, wall, ttfts = asyncio.run(
                        drive(bases[name], MODEL_NAME, c, requests, args.max_tokens, stream)
                    )
                    cell = cells.setdefault((name, c, stream), Cell())
                    cell.rates.append(tokens / wall)
                    cell.ttfts += ttfts
                    mode = "stream" if stream else "whole "
                    print(
                        f"round {round_ + 1} c={c} {mode} {name:>12}: {tokens / wall:6.1f} tok/s",
                        flush=True,
                    )
    return cells


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def report(cells: dict[tuple[str, int, bool], Cell], names: list[str]) -> tuple[str, float]:
    """The markdown table and the worker's lowest throughput ratio to any other system."""
    others = [n for n in names if n != "worker"]
    head = ["c", "mode", *(f"{n} tok/s" for n in names), *(f"{n} TTFT ms" for n in names)]
    head += [f"worker/{n} tok/s" for n in others] + [f"worker/{n} TTFT" for n in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lowest = float("inf")
    for c, stream in sorted({(k[1], k[2]) for k in cells}):
        row = [cells[(n, c, stream)] for n in names]
        mine = row[0]
        rates = [f"{x.tokens_per_s:.1f}" for x in row]
        ttfts = [f"{x.ttft_ms:.0f}" if x.ttft_ms is not None else "-" for x in row]
        vs = [cells[(n, c, stream)] for n in others]
        lowest = min([lowest, *(mine.tokens_per_s / x.tokens_per_s for x in vs)])
        cols = [str(c), "stream" if stream else "whole", *rates, *ttfts]
        cols += [ratio(mine.tokens_per_s, x.tokens_per_s) for x in vs]
        cols += [ratio(mine.ttft_ms, x.ttft_ms) for x in vs]
        lines.append("| " + " | ".join(cols) + " |")
    lines.append("")
    lines.append("tok/s: median over rounds; TTFT: median over every streamed request;")
    lines.append("a TTFT ratio below 1 means the worker answers first.")
    return "\n".join(lines), lowest


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="GGUF (default: the generated demo:bench)")
    parser.add_argument(
        "--llama-server",
        default=os.environ.get("SHUNTER_LLAMA_SERVER") or shutil.which("llama-server"),
        help="llama.cpp's llama-server binary (default: $SHUNTER_LLAMA_SERVER, then PATH)",
    )
    parser.add_argument("--baseline-rev", help="a git revision to run alongside (e.g. main)")
    parser.add_argument("--concurrency", default="1,8", help="comma-separated levels")
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=16, help="per cell and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fail-below", type=float, help="exit 1 under this throughput ratio")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    return args


def main() -> int:
    args = parse_args()
    # a terminated run still stops its servers and removes the baseline's worktree
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if args.model is None:
        from gateway.models.store import resolve_model_path

        args.model = resolve_model_path("demo:bench")
    args.model = Path(args.model).resolve()
    with tempfile.TemporaryDirectory(prefix="shunter-guard-") as logs, ExitStack() as stack:
        bases = start_all(systems(args, stack), stack, Path(logs))
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        cells = measure(args, bases)
    text, lowest = report(cells, list(bases))
    text += f"\nload average at start: {load}; {args.rounds} rounds; model {args.model.name}\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.fail_below is not None and lowest < args.fail_below:
        print(f"worker throughput ratio {lowest:.2f} is below {args.fail_below}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
