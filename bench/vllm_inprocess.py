"""Shunter with vLLM in process vs ``vllm serve`` direct, on one GPU.

Run from the repository root on a machine with a GPU and ``pip install -e '.[vllm]'``::

    python -m bench.vllm_inprocess --model Qwen/Qwen2.5-0.5B-Instruct

Each server is started in turn on the same GPU (``vllm serve``, then ``shunter serve``
with one ``backend: vllm`` deployment of the same engine settings) and driven over HTTP
with the same streaming workload by ``gateway.loadgen``: fixed prompt and output lengths
(``ignore_eos``), concurrency 1 and 32 by default, a warm-up first. Prints throughput
(output tokens/s) and TTFT p50 for both, the ratios, and whether the targets hold
(throughput >= 98% of direct, TTFT p50 within +2 ms); ``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gateway.loadgen.report import LevelSummary, summarize
from gateway.loadgen.runner import Endpoint, new_client, run_level
from gateway.loadgen.workload import Bounds, Distribution, Level, Workload

THROUGHPUT_TARGET = 0.98
TTFT_TARGET_MS = 2.0
START_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Options:
    model: str
    max_model_len: int
    gpu_memory_utilization: float
    prompt_tokens: int
    output_tokens: int
    requests: int
    concurrency: list[int]
    only: str | None
    enforce_eager: bool
    vllm_command: str | None
    logs: Path
    json_path: Path | None


def main() -> int:
    options = parse(sys.argv[1:])
    results: dict[str, dict[int, LevelSummary]] = {}
    if options.only in (None, "direct"):
        results["direct"] = run_server("direct", options)
    if options.only in (None, "shunter"):
        results["shunter"] = run_server("shunter", options)
    report(results, options)
    return 0


def parse(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="HF id or local directory")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=256, help="per concurrency level")
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--only", choices=["direct", "shunter"])
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (both)")
    parser.add_argument(
        "--vllm-command",
        help="how to start the direct server (default: this venv's `vllm serve`); e.g. "
        "'python -m vllm.entrypoints.openai.api_server' where the `vllm` CLI is broken",
    )
    parser.add_argument("--json", type=Path, help="write all figures here")
    parser.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args(argv)
    options = Options(
        model=args.model,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        requests=args.requests,
        concurrency=[int(c) for c in args.concurrency.split(",")],
        only=args.only,
        enforce_eager=args.enforce_eager,
        vllm_command=args.vllm_command,
        logs=args.logs,
        json_path=args.json,
    )
    return options


# servers ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def direct_command(options: Options, port: int) -> list[str]:
    if options.vllm_command:
        head = shlex.split(options.vllm_command)
    else:
        beside = Path(sys.executable).with_name("vllm")  # this venv's, even when not on PATH
        head = [str(beside) if beside.exists() else shutil.which("vllm") or "vllm", "serve"]
    return [
        *head,
        "--model",
        options.model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(options.max_model_len),
        "--gpu-memory-utilization",
        str(options.gpu_memory_utilization),
        "--served-model-name",
        "bench",
        *(["--enforce-eager"] if options.enforce_eager else []),
    ]


def shunter_config(options: Options, directory: Path) -> Path:
    path = directory / "shunter-vllm-bench.yaml"
    deployment = {
        "name": "vllm-bench",
        "backend": "vllm",
        "model": options.model,
        "max_model_len": options.max_model_len,
        "gpu_memory_utilization": options.gpu_memory_utilization,
        "enforce_eager": options.enforce_eager,
    }
    config = {"deployments": [deployment], "models": {"bench": {"candidates": ["vllm-bench"]}}}
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


@contextmanager
def server(kind: str, options: Options) -> Iterator[str]:
    """Start one server, wait until it answers, yield its base URL, stop it."""
    port = free_port()
    log_path = options.logs / f"vllm-bench-{kind}.log"
    if kind == "direct":
        command, ready = direct_command(options, port), "/health"
    else:
        config = shunter_config(options, options.logs)
        command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
        command += ["--port", str(port)]
        ready = "/health/readiness"
    base = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ}
        )
    try:
        wait_ready(process, base + ready, log_path)
        yield base
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_ready(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}; see {log_path}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    raise RuntimeError(f"server not ready after {START_TIMEOUT_S:.0f}s; see {log_path}")


# load -----------------------------------------------------------------------------------


def run_server(kind: str, options: Options) -> dict[int, LevelSummary]:
    print(f"== {kind}: starting", flush=True)
    with server(kind, options) as base:
        return asyncio.run(drive(base, options, kind))


async def drive(base: str, options: Options, kind: str) -> dict[int, LevelSummary]:
    endpoint = Endpoint(url=base, model="bench", extra_body={"ignore_eos": True})
    workload = Workload(
        prompt_tokens=Distribution("fixed", options.prompt_tokens),
        output_tokens=Distribution("fixed", options.output_tokens),
    )
    summaries: dict[int, LevelSummary] = {}
    async with new_client() as client:
        warm = Level("concurrency", max(options.concurrency))  # CUDA graphs, caches
        await run_level(client, endpoint, workload, warm, Bounds(max_requests=int(2 * warm.value)))
        for concurrency in options.concurrency:
            level = Level("concurrency", concurrency)
            requests = max(options.requests, 4 * concurrency)
            run = await run_level(client, endpoint, workload, level, Bounds(max_requests=requests))
            summary = summarize(run)
            summaries[concurrency] = summary
            print(f"   {kind} {line(summary)}", flush=True)
            if summary.failed:
                print(f"   {kind} failures: {summary.errors} {summary.first_error}", flush=True)
    return summaries


def line(summary: LevelSummary) -> str:
    ttft = summary.ttft_ms.p50 if summary.ttft_ms else float("nan")
    return (
        f"{summary.level}: {summary.output_throughput:,.0f} tok/s, TTFT p50 {ttft:.1f} ms, "
        f"{summary.completed}/{summary.requests} ok"
    )


# report ---------------------------------------------------------------------------------


def report(results: dict[str, dict[int, LevelSummary]], options: Options) -> None:
    direct, ours = results.get("direct", {}), results.get("shunter", {})
    print()
    print(f"model {options.model}, prompt {options.prompt_tokens}, output {options.output_tokens}")
    header = f"{'c':>4} {'direct tok/s':>13} {'shunter':>11} {'ratio':>6}"
    print(header + f" {'TTFT p50 direct':>16} {'shunter':>11} {'delta':>8}  verdict")
    verdicts: list[bool] = []
    for c in options.concurrency:
        d, s = direct.get(c), ours.get(c)
        if d is None or s is None:
            continue
        ratio = s.output_throughput / d.output_throughput if d.output_throughput else 0.0
        d_ttft = d.ttft_ms.p50 if d.ttft_ms else float("nan")
        s_ttft = s.ttft_ms.p50 if s.ttft_ms else float("nan")
        delta = s_ttft - d_ttft
        ok = ratio >= THROUGHPUT_TARGET and delta <= TTFT_TARGET_MS
        verdicts.append(ok)
        print(
            f"{c:>4} {d.output_throughput:>13,.0f} {s.output_throughput:>11,.0f} {ratio:>6.3f}"
            f" {d_ttft:>13.1f} ms {s_ttft:>8.1f} ms {delta:>+6.1f} ms  {'PASS' if ok else 'FAIL'}"
        )
    if verdicts:
        targets = f">= {THROUGHPUT_TARGET:.0%} throughput, TTFT p50 within +{TTFT_TARGET_MS} ms"
        print(f"targets ({targets}): {'all met' if all(verdicts) else 'NOT met'}")
    if options.json_path is not None:
        data: dict[str, Any] = {
            kind: {str(c): s.to_dict() for c, s in levels.items()}
            for kind, levels in results.items()
        }
        options.json_path.write_text(
            json.dumps({"options": str(options), "results": data}, indent=2)
        )
        print(f"wrote {options.json_path}")


if __name__ == "__main__":
    sys.exit(main())
