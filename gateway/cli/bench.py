"""``shunter bench``: load-test any OpenAI-compatible chat endpoint (or its Responses API, or
an Anthropic Messages endpoint: ``--api``).

Nothing heavy is imported here until the command runs (httpx, rich and the load generator are
imported by the handler).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx
    from rich.console import Console

    from gateway.loadgen import Bounds, Endpoint, Level, LevelRun, LevelSummary, Slo, Workload

EPILOG = """\
examples:
  shunter bench --url http://127.0.0.1:8000 --model demo --concurrency 1,4,8 --max-requests 32
  shunter bench --url http://127.0.0.1:8000/v1 --model demo --rate 2 --duration 60 \\
      --prompt-tokens uniform:64-512 --output-tokens normal:128,32 --slo-ttft-ms 500 --json
  shunter bench --url http://127.0.0.1:8000 --model demo --api messages --max-requests 16

lengths: N, fixed:N, uniform:LOW-HIGH or normal:MEAN,STDDEV (tokens, roughly, for prompts).
Every level stops issuing requests at --duration or --max-requests, whichever comes first;
at least one is required. Requests in flight then finish (bounded by --timeout).
"""


def register(sub: Any) -> None:
    """Add the ``bench`` subcommand to the ``shunter`` subparsers."""
    bench = sub.add_parser(
        "bench",
        help="load-test an OpenAI-compatible endpoint",
        description="Load-test an OpenAI-compatible chat endpoint: TTFT, time per output\n"
        "token and end-to-end percentiles, throughput, errors by kind and goodput.",
        epilog=EPILOG,
    )
    bench.add_argument("--url", required=True, help="base URL (http://host:port[/v1])")
    bench.add_argument("--model", required=True, help="model name to request")
    bench.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    bench.add_argument(
        "--api",
        choices=["chat", "responses", "messages"],
        default="chat",
        help="/v1/chat/completions (default), /v1/responses or Anthropic's /v1/messages",
    )
    load = bench.add_argument_group("load")
    load.add_argument("--concurrency", metavar="N,...", help="concurrent clients (default 1)")
    load.add_argument("--rate", metavar="R,...", help="Poisson arrivals, requests/s")
    load.add_argument("--duration", type=float, metavar="S", help="seconds per level")
    load.add_argument("--max-requests", type=int, metavar="N", help="requests per level")
    load.add_argument("--prompt-tokens", default="128", metavar="DIST", help="(default 128)")
    load.add_argument("--output-tokens", default="128", metavar="DIST", help="max_tokens")
    load.add_argument(
        "--shared-prefix-ratio",
        type=float,
        default=0.0,
        metavar="F",
        help="fraction of requests that start with one common system prompt",
    )
    load.add_argument(
        "--shared-prefix-tokens", type=int, default=256, metavar="N", help="its length"
    )
    load.add_argument("--seed", type=int, default=0, help="same seed, same requests")
    load.add_argument("--no-stream", action="store_true", help="plain (non-SSE) requests")
    load.add_argument("--timeout", type=float, default=300.0, metavar="S", help="per request")
    load.add_argument("--extra-body", metavar="JSON", help="merged into every request body")
    report = bench.add_argument_group("report")
    report.add_argument("--slo-ttft-ms", type=float, metavar="MS", help="goodput: TTFT limit")
    report.add_argument("--slo-tpot-ms", type=float, metavar="MS", help="goodput: TPOT limit")
    report.add_argument("--json", action="store_true", help="print results as JSON only")
    report.add_argument("--plot", type=Path, metavar="PNG", help="latency-vs-throughput chart")
    bench.set_defaults(handler=_bench)


def _bench(args: argparse.Namespace) -> int:
    import asyncio

    from rich.console import Console

    from gateway.loadgen import WorkloadError, render_table

    err = Console(stderr=True)
    try:
        plan = _plan(args)
    except WorkloadError as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        return 2
    endpoint, workload, levels, bounds, slo = plan
    summaries = asyncio.run(_sweep(endpoint, workload, levels, bounds, slo, err, not args.json))
    if args.json:
        print(json.dumps(_document(args, plan, summaries), indent=2))
    else:
        out = Console()
        out = out if out.is_terminal else Console(width=200)  # no wrapping in files and pipes
        out.print(render_table(summaries, f"shunter bench: {args.model} at {args.url}"))
        for s in summaries:
            if s.first_error:
                err.print(f"[yellow]{s.level}[/] first error: {s.first_error}", highlight=False)
    if args.plot is not None:
        from gateway.loadgen.plot import PlotUnavailableError, plot_sweep

        try:
            plot_sweep(summaries, args.plot, f"{args.model} at {args.url}")
        except PlotUnavailableError as exc:
            err.print(f"[red]error:[/] {exc}", highlight=False)
            return 2
        if not args.json:
            err.print(f"plot saved to {args.plot}")
    return 0 if any(s.completed for s in summaries) else 1


Plan = tuple["Endpoint", "Workload", list["Level"], "Bounds", "Slo"]


def _plan(args: argparse.Namespace) -> Plan:
    from gateway.loadgen import (
        Bounds,
        Distribution,
        Endpoint,
        Slo,
        Workload,
        WorkloadError,
        parse_levels,
    )

    if not args.url.startswith(("http://", "https://")):
        raise WorkloadError(f"--url must be an http(s) URL, got {args.url!r}")
    extra: dict[str, Any] = {}
    if args.extra_body:
        try:
            extra = json.loads(args.extra_body)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"--extra-body is not JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise WorkloadError("--extra-body must be a JSON object")
    if args.timeout <= 0:
        raise WorkloadError("--timeout must be positive")
    endpoint = Endpoint(
        args.url, args.model, args.api_key, not args.no_stream, args.timeout, extra, args.api
    )
    workload = Workload(
        prompt_tokens=Distribution.parse(args.prompt_tokens),
        output_tokens=Distribution.parse(args.output_tokens),
        shared_prefix_ratio=args.shared_prefix_ratio,
        shared_prefix_tokens=args.shared_prefix_tokens,
        seed=args.seed,
    )
    levels = parse_levels(args.concurrency, args.rate)
    bounds = Bounds(args.duration, args.max_requests)
    return endpoint, workload, levels, bounds, Slo(args.slo_ttft_ms, args.slo_tpot_ms)


async def _sweep(
    endpoint: Endpoint,
    workload: Workload,
    levels: list[Level],
    bounds: Bounds,
    slo: Slo,
    console: Console,
    show_progress: bool,
) -> list[LevelSummary]:
    from gateway.loadgen import summarize
    from gateway.loadgen.runner import new_client

    summaries: list[LevelSummary] = []
    async with new_client(endpoint.timeout_s) as client:
        for level in levels:
            if show_progress:
                run = await _with_progress(client, endpoint, workload, level, bounds, console)
            else:
                from gateway.loadgen import run_level

                run = await run_level(client, endpoint, workload, level, bounds)
            summaries.append(summarize(run, slo))
    return summaries


async def _with_progress(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    workload: Workload,
    level: Level,
    bounds: Bounds,
    console: Console,
) -> LevelRun:
    """Run one level under a progress bar (the larger of requests done and time elapsed) on
    a terminal; elsewhere (a pipe, a log file) a plain line when the level starts, one every
    :data:`PLAIN_EVERY_S` while it runs, and one when it ends."""
    import asyncio
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gateway.loadgen import RequestResult, run_level

    if not console.is_terminal:
        return await _with_lines(client, endpoint, workload, level, bounds, console)
    counts = {"done": 0, "errors": 0}
    started = time.perf_counter()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[done]} done, {task.fields[errors]} errors"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(level.label, total=1.0, done=0, errors=0)

        def refresh() -> None:
            fractions = [0.0]
            if bounds.max_requests:
                fractions.append(counts["done"] / bounds.max_requests)
            if bounds.duration_s:
                fractions.append((time.perf_counter() - started) / bounds.duration_s)
            done, errors = counts["done"], counts["errors"]
            progress.update(task, completed=min(1.0, max(fractions)), done=done, errors=errors)

        def on_result(result: RequestResult) -> None:
            counts["done"] += 1
            counts["errors"] += 0 if result.ok else 1
            refresh()

        async def tick() -> None:
            while True:
                refresh()
                await asyncio.sleep(0.2)

        ticker = asyncio.create_task(tick())
        try:
            return await run_level(client, endpoint, workload, level, bounds, on_result)
        finally:
            ticker.cancel()


PLAIN_EVERY_S = 10.0


async def _with_lines(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    workload: Workload,
    level: Level,
    bounds: Bounds,
    console: Console,
) -> LevelRun:
    import asyncio
    import time

    from gateway.loadgen import RequestResult, run_level

    counts = {"done": 0, "errors": 0}
    started = time.perf_counter()

    def say(what: str) -> None:
        elapsed = time.perf_counter() - started
        done, errors = counts["done"], counts["errors"]
        line = f"{level.label}: {what}{done} done, {errors} errors, {elapsed:.0f} s"
        console.print(line, highlight=False, soft_wrap=True)

    def on_result(result: RequestResult) -> None:
        counts["done"] += 1
        counts["errors"] += 0 if result.ok else 1

    async def tick() -> None:
        while True:
            await asyncio.sleep(PLAIN_EVERY_S)
            say("")

    limits = [f"{bounds.max_requests} requests"] if bounds.max_requests else []
    limits += [f"{bounds.duration_s:g} s"] if bounds.duration_s else []
    console.print(f"{level.label}: started (up to {' or '.join(limits)})", highlight=False)
    ticker = asyncio.create_task(tick())
    try:
        run = await run_level(client, endpoint, workload, level, bounds, on_result)
    finally:
        ticker.cancel()
    say("finished, ")
    return run


def _document(
    args: argparse.Namespace, plan: Plan, summaries: list[LevelSummary]
) -> dict[str, Any]:
    endpoint, workload, _, bounds, slo = plan
    return {
        "url": endpoint.chat_url,
        "api": endpoint.api,
        "model": endpoint.model,
        "stream": endpoint.stream,
        "workload": {
            "prompt_tokens": str(workload.prompt_tokens),
            "output_tokens": str(workload.output_tokens),
            "shared_prefix_ratio": workload.shared_prefix_ratio,
            "shared_prefix_tokens": workload.shared_prefix_tokens,
            "seed": workload.seed,
        },
        "bounds": {"duration_s": bounds.duration_s, "max_requests": bounds.max_requests},
        "slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms},
        "levels": [s.to_dict() for s in summaries],
    }
