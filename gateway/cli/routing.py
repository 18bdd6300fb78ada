"""``shunter plan`` (memory fit per deployment) and ``shunter route`` (explain a
routing decision): both read a config and change nothing."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.config import load_or_report

if TYPE_CHECKING:
    from backends.base import LiveStats
    from gateway.dispatch import Gateway
    from policies import Candidate, RequestFacts

_CONFIG_HELP = "routing YAML (default: the embedded default)"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plan`` and ``route`` to the ``shunter`` command."""
    plan = sub.add_parser(
        "plan",
        help="print each local deployment's memory fit",
        description="What each local deployment needs in memory (weights, KV cache, "
        "overhead) on its device, and whether it fits. Exit status 1 when a model cannot "
        "be read or a device is missing.",
    )
    plan.add_argument("--config", type=Path, help=_CONFIG_HELP)
    plan.set_defaults(handler=_plan)

    route = sub.add_parser(
        "route",
        help="explain how a request to a model would be routed",
        description="Every candidate of a model, every policy step's verdict and score, "
        "and the choice; exit status 1 when nothing is chosen or a local model cannot be "
        "read (each named on stderr). Live figures (queue, rates, measured throughput, "
        "which prices deployments billed per hour) come from a running gateway with --live.",
    )
    route.add_argument("--config", type=Path, help=_CONFIG_HELP)
    route.add_argument("--model", required=True, help="the public model name to route")
    route.add_argument("--prompt-tokens", type=int, default=500, help="the request's prompt size")
    route.add_argument(
        "--max-tokens", type=int, default=None, help="its max_tokens (default: unset)"
    )
    route.add_argument("--tools", action="store_true", help="the request carries tools")
    route.add_argument("--json-schema", action="store_true", help="it asks for json_schema")
    route.add_argument("--images", action="store_true", help="it carries images")
    route.add_argument(
        "--part",
        action="append",
        default=[],
        metavar="TYPE",
        help="it carries a content part of this type (input_audio, file...); repeatable",
    )
    route.add_argument(
        "--live",
        metavar="URL",
        help="a running gateway (http://host:port) whose live figures to route with; "
        "SHUNTER_MASTER_KEY is sent when set",
    )
    route.set_defaults(handler=_route)


def _plan(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gateway.planner.render import plan_table
    from gateway.residency.placement import plan_deployments

    config = load_or_report(args.config)
    if config is None:
        return 2
    placements = plan_deployments(config.deployments, config.devices)
    console = Console() if sys.stdout.isatty() else Console(width=200)
    planned = [(p.deployment, p.plan) for p in placements if p.plan is not None]
    if planned:
        console.print(plan_table([plan for _, plan in planned], names=[n for n, _ in planned]))
    for placement in placements:
        if placement.plan is None and not placement.problem:
            console.print(f"{placement.deployment}: {placement.note}", highlight=False)
    problems = [p for p in placements if p.problem]
    for settings in config.deployments:
        size = settings.model_size()
        shown = size.describe() if size is not None else "unknown (declare params_b)"
        console.print(f"size {settings.name}: {shown}", highlight=False)
    for placement in problems:
        print(f"error: deployment {placement.deployment!r}: {placement.note}", file=sys.stderr)
    return 1 if problems else 0


def _route(args: argparse.Namespace) -> int:
    import time

    from backends.registry import create_backend
    from gateway.dispatch import Gateway, cascade_plan
    from gateway.errors import GatewayError
    from gateway.residency.placement import plan_deployments
    from policies import RequestFacts

    config = load_or_report(args.config)
    if config is None:
        return 2
    # backends are built but not started: capabilities and prices need no engine
    gateway = Gateway(config, {d.name: create_backend(d) for d in config.deployments})
    placements = plan_deployments(config.deployments, config.devices)
    gateway.fits = {p.deployment: p.plan.fit for p in placements if p.plan is not None}
    unreadable = [p for p in placements if p.problem]  # shunter serve would refuse them
    for placement in unreadable:
        print(f"error: deployment {placement.deployment!r}: {placement.note}", file=sys.stderr)
    request = RequestFacts(
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
        needs_tools=args.tools,
        needs_json_schema=args.json_schema,
        has_images=args.images or "image_url" in args.part,
        content_parts=frozenset(args.part) | ({"image_url"} if args.images else set()),
    )
    try:
        route = gateway.route(args.model)
        measured = _live_stats(args.live, gateway) if args.live else {}
        pool = gateway.policy_candidates(args.model)
    except GatewayError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot read live figures from {args.live}: {exc}", file=sys.stderr)
        return 2
    pool = [_with_live(candidate, measured.get(candidate.name)) for candidate in pool]
    decision = route.policy.route(request, pool, now=time.monotonic())
    print(f"model {args.model}: policy {route.policy.describe()}")
    print(decision.explain())
    print("sizes: " + ", ".join(f"{c.name} {_size(c)}" for c in pool))
    for line in _hourly_prices(pool, request, live=bool(args.live)):
        print(line)
    if route.cascade is not None:
        logprobs = {d.name: d.returns_logprobs() for d in config.deployments}
        print(cascade_plan(route.cascade, [(n, logprobs[n]) for n in decision.names]))
    print(f"route: {decision.reason()}")
    return 0 if decision.chosen is not None and not unreadable else 1


def _live_stats(url: str, gateway: Gateway) -> dict[str, LiveStats]:
    """Each deployment's engine figures, as a running gateway's readiness reports them;
    ``gateway`` also takes in its learned context lengths and open breakers."""
    import dataclasses

    import httpx

    from backends.base import LiveStats

    key = os.environ.get("SHUNTER_MASTER_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        body: Any = httpx.get(f"{url.rstrip('/')}/health/readiness", headers=headers).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise OSError(str(exc) or type(exc).__name__) from None
    fields = {f.name for f in dataclasses.fields(LiveStats)} - {"held_prefixes"}  # counted
    deployments = body.get("deployments") if isinstance(body, dict) else None
    gateway.adopt(deployments or {})
    return {
        name: LiveStats(**{k: v for k, v in figures.items() if k in fields})
        for name, figures in (deployments or {}).items()
        if isinstance(figures, dict)
    }


def _with_live(candidate: Candidate, stats: LiveStats | None) -> Candidate:
    import dataclasses

    from gateway.dispatch import DeploymentTracker

    if stats is None:
        return candidate
    return dataclasses.replace(candidate, live=DeploymentTracker().figures(stats))


def _size(candidate: Candidate) -> str:
    from policies import describe_size

    source = candidate.facts.size_source
    return describe_size(candidate) + (f" ({source})" if source else "")


def _hourly_prices(pool: list[Candidate], request: RequestFacts, *, live: bool) -> list[str]:
    """How each deployment priced by the hour is priced per request here."""
    from policies import estimate_cost_usd

    lines = []
    for candidate in pool:
        per_hour = candidate.facts.pricing.usd_per_hour
        if per_hour is None or candidate.facts.pricing.output_per_1m is not None:
            continue
        rate = candidate.live.decode_tokens_per_s
        cost = estimate_cost_usd(request, candidate)
        if cost is not None and rate:
            lines.append(
                f"price {candidate.name}: ${per_hour:g}/hour at {rate:,.0f} tokens/s decoded "
                f"(measured) = ${cost:.6f} for this request"
            )
        else:
            where = "not measured yet" if live else "measured only by a running gateway"
            lines.append(
                f"price {candidate.name}: ${per_hour:g}/hour; its throughput is {where}, "
                "so its cost per request is unknown" + ("" if live else " (see --live)")
            )
    return lines
