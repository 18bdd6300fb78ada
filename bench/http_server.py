"""Shunter under uvicorn (httptools, with the edge's protections: what ``shunter serve``
runs) against Shunter under granian (the Rust HTTP server), on the overhead harness, in
one sitting.

The shared harness (``HARNESS``, default ``/work/shared/bench-overhead`` or
``../shared/bench-overhead`` beside the checkout) starts the fake nginx upstream, pins the
gateway to CPU 1 and the load (wrk, or the harness's aiohttp streaming client) and the
upstream to CPU 0, and writes one JSON line per cell. Both servers serve the same app on
``bench/overhead/shunter.yaml``, one process each, logs at warning. granian runs with the
protections it can express, set as the edge sets them: a 10 s header read timeout, a
64 KiB HTTP/1 buffer, at most 1,024 requests at once (``--backpressure``: queued, not
refused with 503), a backlog of 2,048. Rounds alternate the servers; the figures are
medians over rounds, with granian's ratio to uvicorn.

    .venv/bin/python bench/http_server.py [--rounds 2] [--duration 6] [--concs "1 32"]

Needs nginx-light and wrk (apt), granian (``pip install granian``), and the harness's
client venv (``/tmp/bench-run/clientenv`` with aiohttp and uvloop; see its README).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "bench" / "overhead" / "shunter.yaml"
PORT = 8080


def servers(python: Path) -> dict[str, str]:
    shunter = f"{python} -m gateway.cli serve --config {CONFIG} --port {PORT} --log-level warning"
    granian = (
        f"env SHUNTER_CONFIG={CONFIG} PYTHONPATH={ROOT} {python} -m granian --interface asgi "
        f"--factory --port {PORT} --workers 1 --http 1 --no-ws --loop uvloop "
        "--http1-header-read-timeout 10000 --http1-buffer-size 65536 --backpressure 1024 "
        "--backlog 2048 --no-access-log --log-level warning bench.granian_app:app"
    )
    return {"uvicorn": shunter, "granian": granian}


def harness() -> Path:
    for candidate in (os.environ.get("HARNESS"), "/work/shared/bench-overhead"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return ROOT.parent / "shared" / "bench-overhead"


def run_one(label: str, command: str, out: Path, args: argparse.Namespace) -> None:
    env = {
        **os.environ,
        "LABEL": label,
        "BASE_URL": f"http://127.0.0.1:{PORT}",
        "MODEL": "fake",
        "STREAM_MODEL": "fake-stream",
        "API_KEY": "sk-bench",
        "READY_URL": f"http://127.0.0.1:{PORT}/health/readiness",
        "GATEWAY_CMD": command,
        "OUT_DIR": str(out),
        "RUN_DIR": str(out),
        "PY": args.client_python,
        "CONCS": args.concs,
        "DURATION": str(args.duration),
        "SKIP_DIRECT": "1",
        "KEEP_UPSTREAM": "1",
    }
    subprocess.run(
        ["./bench_gateway.sh"], cwd=harness(), env=env, check=True, stdout=subprocess.DEVNULL
    )


def cells(out: Path, server: str) -> dict[tuple[str, int], list[dict[str, Any]]]:
    found: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for path in sorted(out.glob(f"{server}-r*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            found.setdefault((row["mode"], int(row["concurrency"])), []).append(row)
    return found


def figures(row: dict[str, Any]) -> dict[str, float]:
    stream = row["mode"] == "stream"
    done = row["requests_ok"] if stream else row["requests"]
    cores = row.get("gw_cores") or 0
    return {
        "cpu ms/req": 1000 * row["gw_cpu_s"] / done if done else float("nan"),
        "req/s/core": row["rps"] / cores if cores else float("nan"),
        "p50 ms": row["total_p50_ms" if stream else "lat_p50_ms"],
        "p99 ms": row["total_p99_ms" if stream else "lat_p99_ms"],
    }


def report(out: Path) -> None:
    runs = {server: cells(out, server) for server in ("uvicorn", "granian")}
    names = ("cpu ms/req", "req/s/core", "p50 ms", "p99 ms")
    print(f"{'mode':<8}{'c':>4}  {'figure':<12}{'uvicorn':>10}{'granian':>10}{'ratio':>8}")
    for key in sorted(runs["uvicorn"]):
        for name in names:
            got = [statistics.median(figures(r)[name] for r in runs[s].get(key, [])) for s in runs]
            ratio = got[1] / got[0] if got[0] else float("nan")
            print(f"{key[0]:<8}{key[1]:>4}  {name:<12}{got[0]:>10.2f}{got[1]:>10.2f}{ratio:>7.2f}x")


def harness_arguments(parser: argparse.ArgumentParser, rounds: int, duration: int) -> None:
    """The arguments of a bench that runs cells on the harness (see :func:`run_one`)."""
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--duration", type=int, default=duration, help="seconds per cell")
    parser.add_argument("--concs", default="1 32")
    parser.add_argument("--client-python", default="/tmp/bench-run/clientenv/bin/python")
    parser.add_argument("--out", type=Path, help="results folder (default: a new temp one)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    harness_arguments(parser, rounds=2, duration=6)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="http-server-"))
    commands = servers(ROOT / ".venv" / "bin" / "python")
    for round_ in range(args.rounds):
        for server, command in commands.items():
            run_one(f"{server}-r{round_}", command, out, args)
    print(f"results: {out}")
    report(out)


if __name__ == "__main__":
    sys.exit(main())
