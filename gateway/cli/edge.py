"""What every serving command (``serve``, ``worker``) shares: the address guard, the
connection limits, and binding the port before anything slow starts.

Without API keys (no ``SHUNTER_MASTER_KEY``, no stored key) anyone who reaches the port may
use the gateway, so a command refuses a non-loopback address unless ``--allow-open`` says
the operator means it; then it logs a warning that the gateway is open to the network.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import socket
import sys
from typing import Literal

import structlog

from gateway.admission.keys import auth_configured
from gateway.common.durations import UNIT_SECONDS, split_duration
from gateway.http.edge import EdgeLimits
from gateway.state import StateSettings

Exposure = Literal["loopback", "keys", "open"]
_DEFAULTS = EdgeLimits()


def add_edge_arguments(parser: argparse.ArgumentParser) -> None:
    """``--allow-open`` and the connection limits (see ``gateway.http.edge``)."""
    parser.add_argument(
        "--allow-open",
        action="store_true",
        help="serve a non-loopback address without API keys (anyone who reaches it may use it)",
    )
    limits = parser.add_argument_group("connection limits")
    limits.add_argument(
        "--max-header-bytes",
        type=_positive,
        default=_DEFAULTS.max_header_bytes,
        metavar="N",
        help="request line and headers, in bytes; more gets 431 (default: %(default)s)",
    )
    limits.add_argument(
        "--header-timeout",
        type=_duration,
        default=f"{_DEFAULTS.header_timeout_s:g}s",
        metavar="DUR",
        help="time to send the request headers, e.g. 10s; then 408 (default: %(default)s)",
    )
    limits.add_argument(
        "--body-timeout",
        type=_duration,
        default=f"{_DEFAULTS.body_timeout_s:g}s",
        metavar="DUR",
        help="time to send the whole request body after its headers (default: %(default)s)",
    )
    limits.add_argument(
        "--max-connections",
        type=_positive,
        default=_DEFAULTS.max_connections,
        metavar="N",
        help="open connections; idle ones make room, else 503 (default: %(default)s)",
    )
    limits.add_argument(
        "--max-in-flight",
        type=_positive,
        default=_DEFAULTS.max_in_flight,
        metavar="N",
        help="requests running at once; more get 503 (default: %(default)s)",
    )


def edge_limits(args: argparse.Namespace) -> EdgeLimits:
    """The limits the flags of :func:`add_edge_arguments` set."""
    return EdgeLimits(
        max_header_bytes=args.max_header_bytes,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        max_connections=args.max_connections,
        max_in_flight=args.max_in_flight,
    )


def exposure(host: str, allow_open: bool, state: StateSettings) -> Exposure | None:
    """Who can use a gateway bound to ``host``: only this machine, key holders, or anyone.
    None, with the reason on stderr, when the address needs keys and none are configured."""
    if loopback(host):
        return "loopback"
    if asyncio.run(auth_configured(state)):
        return "keys"
    if allow_open:
        return "open"
    print(
        f"error: refusing to serve {host} without API keys: set SHUNTER_MASTER_KEY "
        "(clients send it as their bearer token) or create keys (shunter keys create), "
        "or pass --allow-open to let anyone who reaches the port use it",
        file=sys.stderr,
    )
    return None


def warn_if_open(exposure: Exposure, host: str, port: int) -> None:
    """Once logging is configured: say loudly that anyone on the network may use it."""
    if exposure == "open":
        structlog.get_logger("shunter.cli").warning(
            "open_to_network",
            address=f"{host}:{port}",
            detail="no API keys and --allow-open: anyone who can reach this address may "
            "use the gateway; set SHUNTER_MASTER_KEY or create keys to require one",
        )


def listen(command: str, host: str, port: int, backlog: int = 2048) -> socket.socket | None:
    """The listening socket of ``shunter COMMAND``, bound before a model loads: a taken port
    is refused in a moment, not after minutes of loading. ``None`` (the reason on stderr,
    with the flag that picks another port) when the address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        print(f"shunter {command}: {cannot_listen(host, port, exc)}", file=sys.stderr)
        return None
    url_host = f"[{host}]" if ":" in host else host
    structlog.get_logger("shunter.cli").info(
        "listening", url=f"http://{url_host}:{port}", detail="requests are answered once ready"
    )
    return sock


def cannot_listen(host: str, port: int, exc: OSError) -> str:
    """Why ``host:port`` could not be bound, and what to do about it."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {host}:{port}: {reason} (another process holds port {port}: "
            "stop it, or choose another port with --port)"
        )
    return f"cannot listen on {host}:{port}: {reason} (choose another --host or --port)"


def loopback(host: str) -> bool:
    """Whether ``host`` is an address only this machine can reach."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _duration(text: str) -> float:
    """``10s``, ``500ms``, ``2m``; a bare number is seconds."""
    parsed = split_duration(text)
    if parsed is None or parsed[0] <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration like 10s or 500ms")
    number, unit = parsed
    return number * UNIT_SECONDS[unit or "s"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value
