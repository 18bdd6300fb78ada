"""The ``shunter`` command line."""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway import __version__
from gateway.cli import bench, calibrate, keys, models, routing, worker
from gateway.cli.edge import (
    add_edge_arguments,
    cannot_listen,
    edge_limits,
    exposure,
    listen,
    warn_if_open,
)

# after its drain, the time a worker of `serve --workers N` has to close its backends and
# the state store before the parent kills it
_SHUTDOWN_GRACE_S = 15.0

DESCRIPTION = (
    "Shunter: an OpenAI-compatible LLM gateway. Run it (serve), check a config "
    "(check-config), see how models fit memory (plan) and how requests route (route), "
    "manage API keys and models, load-test an endpoint (bench), or serve one GGUF (worker)."
)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help as written (epilogs keep their lines), each option followed by its default
    unless its help already says it, or the default is nothing (``None``, off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        quiet = default is None or default is False or default == argparse.SUPPRESS
        if quiet or not action.option_strings or "default" in text:
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """Every ``shunter`` parser and subparser: the same help formatting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


def _parser() -> argparse.ArgumentParser:
    """The whole command line, every subcommand included."""
    parser = Parser(prog="shunter", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the gateway", description="Run the gateway.")
    serve.add_argument(
        "--config", type=Path, help="routing YAML (default: the embedded default, SmolLM2)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="debug also shows tracebacks of start-up failures",
    )
    serve.add_argument(
        "--redis-url",
        help="shared state (default: $SHUNTER_REDIS_URL, else in-memory); a Redis Cluster: "
        "redis+cluster://host:port,host:port/0",
    )
    serve.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM, time for in-flight requests to finish",
    )
    serve.add_argument(
        "--workers",
        type=_workers,
        default=1,
        metavar="N",
        help="gateway processes on the port: a number, or auto (one per core); more than "
        "one needs Redis and no in-process engines",
    )
    add_edge_arguments(serve)
    serve.set_defaults(handler=_serve)

    demo = sub.add_parser("demo-model", help="write a generated random-weight GGUF")
    demo.add_argument("out", type=Path, help="where to write the .gguf file")
    demo.add_argument(
        "--size",
        choices=["tiny", "bench"],
        default="tiny",
        help="tiny: 0.5 MB, for tests; bench: about 125M parameters, q8_0",
    )
    demo.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    demo.set_defaults(handler=_demo_model)

    check = sub.add_parser(
        "check-config",
        help="validate a routing YAML and what it needs from this machine",
        description="Validate a routing YAML: its fields, the references between its "
        "sections, the model files, API key variables and devices it names, and (unless "
        "--offline) whether its remote upstreams answer. Every problem is printed as "
        "file:line: field: message; the exit status is 2 if there is any.",
    )
    check.add_argument(
        "path", type=Path, nargs="?", help="the YAML file (default: the embedded default)"
    )
    check.add_argument(
        "--offline", action="store_true", help="skip what needs the network (upstreams answer)"
    )
    check.set_defaults(handler=_check_config)

    # the other command groups: each module adds its own parsers
    for group in (routing, calibrate, keys, bench, models, worker):
        group.register(sub)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from gateway.cli.startup import brief_startup_errors, preflight
    from gateway.dispatch import Gateway
    from gateway.http.app import AppSettings, create_app
    from gateway.http.server import serve
    from gateway.http.workers import Supervisor, listening_sockets, refusals
    from gateway.state import StateSettings
    from gateway.telemetry.logs import configure_logging

    loaded = preflight(args.config)
    if loaded is None:
        return 2
    state = StateSettings.from_env(redis_url=args.redis_url)
    exposed = exposure(args.host, args.allow_open, state)
    if exposed is None:
        return 2
    in_process = (d.name for d in loaded.config.deployments if d.in_process)
    refused = refusals(args.workers, state.redis_url, in_process)
    for problem in refused:
        print(f"shunter serve: {problem}", file=sys.stderr)
    if refused:
        return 2
    configure_logging(args.log_level)
    brief_startup_errors(args.log_level)
    warn_if_open(exposed, args.host, args.port)

    def run_one(sock: socket.socket) -> int:
        gateway = Gateway.from_config(loaded.config)
        settings = AppSettings(config=loaded.config, config_path=args.config, state=state)
        app = create_app(settings, gateway)
        limits = edge_limits(args)
        return serve(app, gateway, args.host, args.port, args.drain_timeout, limits, sock)

    if args.workers == 1:
        sock = listen("serve", args.host, args.port)  # before the models load
        return 2 if sock is None else run_one(sock)
    try:
        sockets = listening_sockets(args.host, args.port, args.workers)
    except OSError as exc:
        print(f"shunter serve: {cannot_listen(args.host, args.port, exc)}", file=sys.stderr)
        return 2
    # the workers' drain, then their shutdown (closing backends and the store)
    stop_timeout_s = args.drain_timeout + _SHUTDOWN_GRACE_S
    return Supervisor(run_one, sockets, stop_timeout_s=stop_timeout_s).run()


def _workers(value: str) -> int:
    from gateway.http.workers import worker_count

    try:
        return worker_count(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r}: a number of workers (1 or more), or auto"
        ) from None


def _demo_model(args: argparse.Namespace) -> int:
    from gateway.models.demo import write_demo_model

    path = write_demo_model(args.out, args.size, seed=args.seed)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, size={args.size})")
    return 0


def _check_config(args: argparse.Namespace) -> int:
    from gateway.config.checks import check_config
    from gateway.config.loading import report

    found = check_config(args.path, serving=False, network=not args.offline)
    report(found.issues)
    for note in found.notes:
        print(f"note: {note}")
    if found.loaded is None:
        return 2
    config = found.loaded.config
    print(
        f"{found.loaded.source}: ok ({len(config.deployments)} deployments, "
        f"{len(config.models)} models: {', '.join(config.models)})"
    )
    return 0
