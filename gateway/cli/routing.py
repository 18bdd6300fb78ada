"""``shunter plan`` (memory fit per deployment) and ``shunter route`` (explain a
routing decision): both read a config and change nothing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gateway.config import load_or_report


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plan`` and ``route`` to the ``shunter`` command."""
    plan = sub.add_parser("plan", help="print each local deployment's memory fit")
    plan.add_argument("--config", type=Path, help="routing YAML (default: embedded demo)")
    plan.set_defaults(handler=_plan)

    route = sub.add_parser("route", help="explain how a request to a model would be routed")
    route.add_argument("--config", type=Path, help="routing YAML (default: embedded demo)")
    route.add_argument("--model", required=True)
    route.add_argument("--prompt-tokens", type=int, default=500)
    route.add_argument("--max-tokens", type=int, default=None)
    route.add_argument("--tools", action="store_true", help="the request carries tools")
    route.add_argument("--json-schema", action="store_true", help="it asks for json_schema")
    route.add_argument("--images", action="store_true", help="it carries images")
    route.set_defaults(handler=_route)


def _plan(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gateway.planner import plan_table
    from gateway.residency.placement import plan_deployments

    config = load_or_report(args.config)
    if config is None:
        return 2
    placements = plan_deployments(config.deployments, config.devices)
    console = Console() if sys.stdout.isatty() else Console(width=200)
    plans = [p.plan for p in placements if p.plan is not None]
    if plans:
        console.print(plan_table(plans))
    for placement in placements:
        if placement.plan is None:
            console.print(f"{placement.deployment}: {placement.note}")
    return 0


def _route(args: argparse.Namespace) -> int:
    import time

    from backends.registry import create_backend
    from gateway.dispatch.router import Gateway
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
    request = RequestFacts(
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
        needs_tools=args.tools,
        needs_json_schema=args.json_schema,
        has_images=args.images,
    )
    try:
        route = gateway.route(args.model)
        pool = gateway.policy_candidates(args.model)
    except GatewayError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    decision = route.policy.route(request, pool, now=time.monotonic())
    print(f"model {args.model}: policy {route.policy.describe()}")
    print(decision.explain())
    print(f"route: {decision.reason()}")
    return 0 if decision.chosen is not None else 1
