"""Agent sessions replayed through a real gateway: how well each routing policy keeps
multi-turn sessions fast, cached and cheap (bench/AGENT_REPLAY.md).

Run from the repository root::

    python -m bench.agent_replay            # the full run: 16 sessions, 1-2 minutes a policy
    python -m bench.agent_replay --quick    # 4 short sessions: under two minutes in all

Generated agent sessions (:mod:`bench.agent_workload`: a shared system prompt with a tool
list, histories that grow every turn, sessions arriving in bursts, no session key) are sent
through ``shunter serve`` to ``shunter worker`` engines on loopback (llama.cpp, prefix cache
on) and a priced API (:mod:`bench.agent_api`, the spill target), once per policy of
``bench/configs/agent_replay_policies.yaml``, each on fresh processes (cold caches), the
order rotating from round to round. Printed: a table per policy with ratios against
least-loaded, then the routing simulator's prediction for the same requests; written: a
JSON record and a PNG plot. Not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import httpx

from bench import agent_fleet as fleet
from bench.agent_api import ApiProfile
from bench.agent_client import replay
from bench.agent_report import PolicyRun, all_api_usd, plot, pooled, summarize, table, write_json
from bench.agent_sim import calibrate, comparison, predict
from bench.agent_workload import Session, Shape, sessions

POLICIES = Path(__file__).resolve().parent / "configs" / "agent_replay_policies.yaml"
QUICK = Shape(sessions=4, turns=(3, 3), burst_size=4, burst_gap_s=10.0, system_tokens=200,
              tool_result_tokens=(15, 30), answer_tokens=(6, 12))  # fmt: skip


def _pair(text: str, kind: type) -> tuple[Any, Any]:
    low, _, high = text.partition("-")
    return kind(low), kind(high or low)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see ``--help``)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4 sessions of 3 turns, short prompts")
    p.add_argument("--sessions", type=int, help="concurrent agent sessions (default 16)")
    p.add_argument("--turns", help="turns per session, LOW-HIGH (default 8-12)")
    p.add_argument("--burst-size", type=int, help="sessions that start together (default 8)")
    p.add_argument("--burst-gap-s", type=float, help="seconds between bursts (default 45)")
    p.add_argument("--system-tokens", type=int, help="shared system prompt (default 400 words)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--model", default="tiny", help="tiny (default), bench, smollm2 or a GGUF path")
    p.add_argument("--workers", type=int, default=2, help="shunter worker engines (default 2)")
    p.add_argument("--parallel", type=int, default=4, help="sequences per engine")
    p.add_argument("--ctx", type=int, help="context per sequence (default 8192; quick 4096)")
    p.add_argument("--threads", type=int, default=1, help="threads per engine")
    p.add_argument("--policies", type=Path, default=POLICIES, help="YAML: name -> policy steps")
    p.add_argument("--only", help="comma-separated policy names to run")
    p.add_argument("--rounds", type=int, default=1, help="runs of every policy, order rotated")
    p.add_argument("--ttft-slo-ms", type=float, default=1500.0, help="the TTFT target")
    p.add_argument("--api-ttft-ms", type=float, default=450.0, help="the API's median TTFT")
    p.add_argument("--api-tokens-per-s", type=float, default=80.0)
    p.add_argument("--api-input-per-1m", type=float, default=0.15, help="USD")
    p.add_argument("--api-output-per-1m", type=float, default=0.60, help="USD")
    p.add_argument("--local-usd-per-hour", type=float, default=0.15, help="each engine; 0: free")
    p.add_argument("--limit-s", type=float, help="longest replay per policy (default 900; 120)")
    p.add_argument("--out", type=Path, default=Path("agent_replay"), help="JSON and PNG prefix")
    p.add_argument("--no-sim", action="store_true", help="skip calibration and the simulator")
    return p.parse_args(argv)


def shape_of(args: argparse.Namespace) -> Shape:
    """The workload's shape: the default (or quick) one with the options given."""
    shape = QUICK if args.quick else Shape()
    changes: dict[str, Any] = {"seed": args.seed}
    for name in ("sessions", "burst_size", "burst_gap_s", "system_tokens"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.turns:
        changes["turns"] = _pair(args.turns, int)
    return replace(shape, **changes)


def model_path(name: str) -> Path:
    """The GGUF to serve: a generated demo model, SmolLM2 from its package, or a file."""
    from gateway.models.store import resolve_model_path

    alias = {"smollm2": "package:smollm2", "bench": "demo:bench", "tiny": "demo:tiny"}
    return resolve_model_path(alias.get(name, name)).resolve()


def runnable(policies: dict[str, Any], spec: fleet.FleetSpec, folder: Path) -> dict[str, Any]:
    """The policies the gateway accepts; a line for each one it rejects."""
    fake = {f"w{i}": f"http://127.0.0.1:{9 + i}" for i in range(spec.workers)}
    kept = {}
    for name, steps in policies.items():
        problem = fleet.check_config(fleet.gateway_config(spec, fake, "http://127.0.0.1:9", steps),
                                     folder)  # fmt: skip
        if problem is None:
            kept[name] = steps
        else:
            print(f"skipped {name}: the gateway rejects its config ({problem})", flush=True)
    return kept


def warm(workers: dict[str, str]) -> None:
    """One short request to each engine (before calibrating it)."""
    body = {"model": fleet.ENGINE_MODEL, "max_tokens": 2,
            "messages": [{"role": "user", "content": "warm up"}]}  # fmt: skip
    for url in workers.values():
        httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).raise_for_status()


def run_policy(
    name: str, steps: Any, round_: int, spec: fleet.FleetSpec, shape: Shape,
    found: list[Session], logs: Path, limit_s: float,
) -> PolicyRun:  # fmt: skip
    """One policy on fresh engines and a fresh gateway (cold caches, no carried figures)."""
    with fleet.engines(spec, logs) as (workers, api):
        # no warm-up request: its few tokens would be the engines' only measured prefill
        # rate (a 10 s throughput) when the first turns are routed
        config = fleet.gateway_config(spec, workers, api, steps)
        with fleet.gateway(config, logs, f"{name}-{round_}") as base:
            time.sleep(1.5)  # the gateway's first poll of the workers' figures
            sent, wall = asyncio.run(replay(base, fleet.PUBLIC_MODEL, shape, found, limit_s))
            stats = fleet.worker_stats(workers)
            served = fleet.api_served(api)
    return PolicyRun(name, steps if isinstance(steps, list) else [steps], round_, wall, sent,
                     stats, served)  # fmt: skip


def describe_workload(shape: Shape, found: list[Session]) -> str:
    """One paragraph: how many requests, how long the prompts, how much is shared."""
    turns = [t for s in found for t in s.turns]
    prompts = [t.prompt_tokens for t in turns]
    system = found[0].turns[0].messages[0]["content"]
    shared = len(system.split()) * len(turns) / sum(prompts)
    return (
        f"workload: {len(found)} sessions, {len(turns)} requests, {shape.turns[0]}-"
        f"{shape.turns[1]} turns, bursts of {shape.burst_size} every {shape.burst_gap_s:g} s; "
        f"prompts {min(prompts)}-{max(prompts)} bench tokens "
        f"(mean {sum(prompts) / len(prompts):.0f}), "
        f"the shared system prompt {100 * shared:.0f}% of all prompt tokens; answers "
        f"{sum(t.max_tokens for t in turns)} tokens in all"
    )


def main(argv: list[str] | None = None) -> int:
    """Run every policy, print the tables, write the record."""
    args = parse_args(argv)
    shape, api = shape_of(args), ApiProfile(
        args.api_ttft_ms, tokens_per_s=args.api_tokens_per_s, input_per_1m=args.api_input_per_1m,
        output_per_1m=args.api_output_per_1m, seed=args.seed,
    )  # fmt: skip
    spec = fleet.FleetSpec(
        model_path(args.model), args.workers, args.parallel,
        args.ctx or (4096 if args.quick else 8192), args.threads, args.local_usd_per_hour, api,
    )  # fmt: skip
    found = sessions(shape)
    print(describe_workload(shape, found), flush=True)
    print(f"engines: {spec.workers} x shunter worker {spec.model.name}, {spec.parallel} "
          f"sequences, {spec.ctx} context, {spec.threads} thread(s); API TTFT ~{api.ttft_ms:g} "
          f"ms, {api.tokens_per_s:g} tok/s, ${api.input_per_1m}/${api.output_per_1m} per 1M; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)  # fmt: skip
    policies = fleet.policy_steps(args.policies.read_text(), args.ttft_slo_ms)
    if args.only:
        policies = {k: v for k, v in policies.items() if k in args.only.split(",")}
    with tempfile.TemporaryDirectory(prefix="shunter-replay-") as tmp:
        return run_all(args, shape, spec, found, policies, Path(tmp))


def run_all(
    args: argparse.Namespace, shape: Shape, spec: fleet.FleetSpec, found: list[Session],
    policies: dict[str, Any], logs: Path,
) -> int:  # fmt: skip
    """Calibrate, replay every runnable policy in rotated order, report."""
    kept = runnable(policies, spec, logs)
    if not kept:
        print("nothing to run")
        return 1
    figures = None
    if not args.no_sim:
        with fleet.engines(replace(spec, workers=1), logs) as (workers, _):
            warm(workers)
            figures = calibrate(workers["w0"], fleet.ENGINE_MODEL, spec.parallel,
                                min(shape.system_tokens, spec.ctx // 2))  # fmt: skip
        print(f"engine figures (one engine alone): {asdict(figures)}", flush=True)
    limit = args.limit_s or (120.0 if args.quick else 900.0)
    runs: list[PolicyRun] = []
    names = list(kept)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            run = run_policy(name, kept[name], round_, spec, shape, found, logs, limit)
            print(f"round {round_ + 1} {name}: {len(run.sent)} requests in {run.wall_s:.0f} s, "
                  f"{sum(not s.ok for s in run.sent)} failed", flush=True)  # fmt: skip
            runs.append(run)
    report(args, spec, found, runs, figures)
    return 0


def report(
    args: argparse.Namespace, spec: fleet.FleetSpec, found: list[Session],
    runs: list[PolicyRun], figures: Any,
) -> None:  # fmt: skip
    """The tables, the JSON record, the plot."""
    all_api = all_api_usd(found, spec.api)
    each = [summarize(r, args.ttft_slo_ms, spec.api, spec.usd_per_hour) for r in runs]
    rows = [
        pooled([x for x in each if x["policy"] == n]) for n in dict.fromkeys(r.name for r in runs)
    ]
    price = f"${spec.usd_per_hour:g}/hour each" if spec.usd_per_hour else "free"
    local = [s for r in runs for s in r.sent if s.ok and s.deployment.startswith("w")]
    if local:
        engine = sum(s.prompt_tokens or 0 for s in local) / sum(s.prompt_estimate for s in local)
        print(f"\nthe engines count {engine:.2f} tokens per bench token (word) of prompt")
    print(f"\nTTFT target {args.ttft_slo_ms:g} ms; local engines {price} for the run's wall "
          f"time; all-API cost of the workload ${all_api:.4f}; medians over {args.rounds} "
          f"round(s)\n\n{table(rows, all_api)}\n", flush=True)  # fmt: skip
    sim: list[dict[str, Any]] = []
    if figures is not None:
        engines = [figures.spec(f"w{i}", spec.usd_per_hour, spec.ctx) for i in range(spec.workers)]
        sim = predict(runs, found, spec.api, engines, args.ttft_slo_ms)
        print("routing simulator (bench/route_sim.py) on each run's own requests, no prefix "
              f"cache:\n\n{comparison(rows, sim, all_api)}\n")  # fmt: skip
    meta = {"args": {k: str(v) for k, v in vars(args).items()}, "all_api_usd": all_api,
            "engine_figures": None if figures is None else asdict(figures)}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    json_path = args.out.with_suffix(".json")
    write_json(json_path, meta, rows, runs, sim)
    print(f"record: {json_path}")
    print(plot(args.out.with_suffix(".png"), rows, all_api, args.ttft_slo_ms))


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop every process on the way
    sys.exit(main())
