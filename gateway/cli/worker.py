"""``shunter worker``: one GGUF served by the batched llama.cpp engine, on its own.

A worker is the gateway with a single in-process llama.cpp deployment and a model route of
the same name, built from command-line flags instead of a YAML file. It speaks the same
OpenAI-compatible API (so a gateway can use it as a remote deployment through its
OpenAI-compatible backend) and exposes its live figures (sequences busy, KV cells, queue,
prefill/decode rates, prefix-cache hit rate, KV fingerprint) at ``GET /v1/worker/stats``,
and moves one sequence's KV cache out and in at ``GET /v1/worker/kv/{link}`` and
``PUT /v1/worker/kv`` (:mod:`gateway.http.kvroutes`). On SIGTERM it keeps its KV exports
open for a handoff window after its last stream (``--handoff-s``,
:mod:`gateway.http.handoff`), for a gateway to move its caches to its peers.

Like ``serve``, a worker binds a non-loopback address only with a key to check
(``SHUNTER_MASTER_KEY``: callers send it as their bearer token, a gateway through its
deployment's ``api_key_env``) or with ``--allow-open``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from backends.llamacpp import LlamaCppSettings
from gateway.cli.edge import add_edge_arguments, edge_limits, exposure, listen, warn_if_open
from gateway.config import GatewayConfig


def register(subparsers: Any) -> None:
    """Add the ``worker`` subcommand to the ``shunter`` parser."""
    worker = subparsers.add_parser(
        "worker", help="serve one GGUF with the batched llama.cpp engine (OpenAI API)"
    )
    worker.add_argument("--model", type=Path, required=True, help="path to a .gguf file")
    worker.add_argument("--name", help="model name clients send (default: the file's stem)")
    worker.add_argument("--parallel", type=int, default=4, help="sequences decoded together")
    worker.add_argument("--ctx", type=int, default=4096, help="context tokens per sequence")
    worker.add_argument("--threads", type=int, help="CPU threads (default: every core)")
    worker.add_argument(
        "--gpu-layers", type=int, default=0, help="layers offloaded to a GPU; -1: every layer"
    )
    worker.add_argument(
        "--kv-cache-type", choices=["f16", "q8_0"], default="f16", help="KV cache precision"
    )
    worker.add_argument(
        "--flash-attn",
        choices=["auto", "on", "off"],
        default="auto",
        help="flash attention; auto: where the device supports it",
    )
    worker.add_argument("--max-queue", type=int, default=64, help="requests waiting for a slot")
    worker.add_argument(
        "--kv-move-max-mb",
        type=int,
        default=2048,
        metavar="MIB",
        help="largest KV state of one sequence imported (PUT /v1/worker/kv), in MiB",
    )
    worker.add_argument("--host", default="127.0.0.1", help="address to listen on")
    worker.add_argument("--port", type=int, default=8080, help="port to listen on")
    worker.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="debug also shows tracebacks of start-up failures",
    )
    worker.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM, time for in-flight requests to finish",
    )
    worker.add_argument(
        "--handoff-s",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="on SIGTERM, after the last stream: time a gateway gets to move the held KV "
        "caches to peers (0: exit at once)",
    )
    worker.add_argument(
        "--handoff-idle-s",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="end the handoff early when no KV export was asked for this long",
    )
    add_edge_arguments(worker)
    worker.set_defaults(handler=run_worker)


def worker_config(args: argparse.Namespace) -> GatewayConfig:
    """The gateway config of a worker: one llama.cpp deployment, one model route."""
    name = args.name or re.sub(r"[^A-Za-z0-9_.:/-]+", "-", Path(args.model).stem) or "model"
    deployment: dict[str, Any] = {
        "name": name,
        "backend": "llamacpp",
        "model": str(args.model),
        "parallel": args.parallel,
        "n_ctx": args.ctx,
        "gpu_layers": args.gpu_layers,
        "kv_cache_type": args.kv_cache_type,
        "flash_attn": {"on": True, "off": False}.get(args.flash_attn, "auto"),
        "max_queue": args.max_queue,
        "kv_move_max_mb": args.kv_move_max_mb,
    }
    if args.threads is not None:
        deployment["threads"] = args.threads
    return GatewayConfig.model_validate(
        {"deployments": [deployment], "models": {name: {"candidates": [name]}}}
    )


def run_worker(args: argparse.Namespace) -> int:
    from gateway.cli.startup import brief_startup_errors
    from gateway.dispatch import Gateway
    from gateway.http.app import AppSettings, create_app
    from gateway.http.handoff import Handoff
    from gateway.http.server import serve
    from gateway.state import StateSettings
    from gateway.telemetry.logs import configure_logging

    if not Path(args.model).is_file():
        print(f"error: no GGUF file at {args.model}", file=sys.stderr)
        return 2
    try:
        config = worker_config(args)
    except ValidationError as exc:
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"])
            print(f"error: {where}: {error['msg']}", file=sys.stderr)
        return 2
    # a worker keeps its state in memory: only a master key can protect it
    exposed = exposure(args.host, args.allow_open, StateSettings())
    if exposed is None:
        return 2
    configure_logging(args.log_level)
    brief_startup_errors(args.log_level)
    warn_if_open(exposed, args.host, args.port)
    sock = listen("worker", args.host, args.port)  # before the model loads
    if sock is None:
        return 2
    describe_worker(config, args, exposed)
    gateway = Gateway.from_config(config)
    label = f"shunter worker --model {args.model}"
    app = create_app(AppSettings(config=config, watch_config=False, label=label), gateway)
    limits = edge_limits(args)
    handoff = Handoff(args.handoff_s, args.handoff_idle_s) if args.handoff_s > 0 else None
    return serve(app, gateway, args.host, args.port, args.drain_timeout, limits, sock, handoff)


def describe_worker(config: GatewayConfig, args: argparse.Namespace, exposed: str) -> None:
    """The worker's start-up line: what it serves, how, where, and who may call it."""
    import structlog

    (deployment,) = config.deployments
    assert isinstance(deployment, LlamaCppSettings)
    structlog.get_logger("shunter.worker").info(
        "worker_starting",
        model=deployment.name,
        file=str(Path(args.model).resolve()),
        parallel=deployment.parallel,
        ctx_per_sequence=deployment.n_ctx,
        threads=deployment.threads or os.cpu_count(),
        gpu_layers=deployment.gpu_layers,
        kv_cache_type=deployment.kv_cache_type,
        max_queue=deployment.max_queue,
        url=f"http://{args.host}:{args.port}/v1",
        stats=f"http://{args.host}:{args.port}/v1/worker/stats",
        auth={"loopback": "none (loopback only)", "keys": "master key", "open": "none (open)"}[
            exposed
        ],
    )
