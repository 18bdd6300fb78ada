"""The ``shunter`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway import __version__
from gateway.cli import bench, keys, models, routing, worker
from gateway.cli.edge import add_edge_arguments, edge_limits, exposure, warn_if_open
from gateway.config import GatewayConfig, load_or_report


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shunter", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", type=Path, help="routing YAML (default: embedded demo)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--log-level", default="info")
    serve.add_argument(
        "--redis-url", help="shared state (default: $SHUNTER_REDIS_URL, else in-memory)"
    )
    serve.add_argument(
        "--drain-timeout", type=float, default=30.0, help="seconds to finish in-flight requests"
    )
    add_edge_arguments(serve)
    serve.set_defaults(handler=_serve)

    demo = sub.add_parser("demo-model", help="write a generated random-weight GGUF")
    demo.add_argument("out", type=Path)
    demo.add_argument("--size", choices=["tiny", "bench"], default="tiny")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(handler=_demo_model)

    check = sub.add_parser("check-config", help="validate a routing YAML")
    check.add_argument("path", type=Path)
    check.set_defaults(handler=_check_config)

    # the other command groups: each module adds its own parsers
    for group in (routing, keys, bench, models, worker):
        group.register(sub)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from gateway.dispatch.router import Gateway
    from gateway.http.app import AppSettings, create_app
    from gateway.http.server import serve
    from gateway.state import StateSettings
    from gateway.telemetry.logs import configure_logging

    config = load_or_report(args.config)
    if config is None:
        return 2
    state = StateSettings.from_env(redis_url=args.redis_url)
    exposed = exposure(args.host, args.allow_open, state)
    if exposed is None:
        return 2
    configure_logging(args.log_level)
    warn_if_open(exposed, args.host, args.port)
    gateway = Gateway.from_config(config)
    settings = AppSettings(config=config, config_path=args.config, state=state)
    app = create_app(settings, gateway)
    return serve(app, gateway, args.host, args.port, args.drain_timeout, edge_limits(args))


def _demo_model(args: argparse.Namespace) -> int:
    from gateway.models.demo import write_demo_model

    path = write_demo_model(args.out, args.size, seed=args.seed)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, size={args.size})")
    return 0


def _check_config(args: argparse.Namespace) -> int:
    config = load_or_report(args.path)
    if config is None:
        return 2
    if any(d.backend == "vllm" for d in config.deployments):
        from backends.vllm.backend import check_available

        problem = check_available()
        if problem is not None:
            print(f"{args.path}: {problem}", file=sys.stderr)
            return 2
    for problem in _not_gguf(config):
        print(f"{args.path}: {problem}", file=sys.stderr)
        return 2
    print(
        f"{args.path}: ok ({len(config.deployments)} deployments, "
        f"{len(config.models)} models: {', '.join(config.models)})"
    )
    return 0


def _not_gguf(config: GatewayConfig) -> list[str]:
    """llama.cpp deployments whose ``model`` names an existing file that is not a GGUF."""
    from gateway.models.store import GGUF_MAGIC

    problems = []
    for deployment in config.deployments:
        path = Path(deployment.model).expanduser()
        if deployment.backend != "llamacpp" or not path.is_file():
            continue
        with path.open("rb") as handle:
            head = handle.read(len(GGUF_MAGIC))
        if head != GGUF_MAGIC:
            problems.append(
                f"deployment {deployment.name!r}: model {deployment.model} is not a GGUF "
                f"file (it starts with {head!r}, not {GGUF_MAGIC!r})"
            )
    return problems
