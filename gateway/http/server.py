"""Running the app under uvicorn with a graceful, draining shutdown.

On SIGTERM or SIGINT: readiness turns 503 and new API requests get 503 with retry-after
(so a load balancer moves on), uvicorn stops accepting connections, in-flight requests and
streams run to completion for up to ``drain_timeout_s``, then the lifespan closes every
backend (releasing engine memory) and the process exits 0.

Every connection is bounded by :class:`gateway.http.edge.EdgeLimits` (header size, header
and body timeouts, connection and in-flight caps); the connection cap is lowered to fit
the process's file descriptor limit when that cannot be raised far enough.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import gc
import os
import resource
import signal
import socket
import threading
from collections.abc import Iterator, Mapping
from types import FrameType

import structlog
import uvicorn

from gateway.dispatch import Gateway
from gateway.http.edge import EdgeConfig, EdgeLimits
from gateway.http.handoff import Handoff, drain_and_hand_off

log = structlog.get_logger("shunter.server")
# descriptors besides client connections: listening socket, model files, Redis, logs, ...
_RESERVED_FDS = 128
# A request allocates a few thousand short-lived objects; with CPython's default threshold
# (700) the young generation is collected several times per ten requests, and each full
# collection walks every module, class and schema loaded at start. Start-up objects are
# frozen out of collection, and the young generation collected every 10,000 allocations:
# the collector's share of a small request drops from about a tenth to under 1%.
_GC_THRESHOLDS = (10_000, 20, 50)
# A request body, its decoded text and the body sent upstream are each as large as the
# prompt. glibc serves allocations that large with fresh mmaps (first at 128 KiB, then up
# to the largest size freed so far) and returns freed heap above 128 KiB to the system, so
# every large prompt paid page faults for each of its buffers: about half the gateway's CPU
# for a 1 MB prompt. Buffers below 32 MiB now come from the heap, and up to 128 MiB of
# freed heap is kept for the next large request (resident memory stays at that high-water
# mark). MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the environment win.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 128 << 20


class DrainingServer(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, gateway: Gateway, handoff: Handoff | None = None
    ) -> None:
        super().__init__(config)
        self.gateway = gateway
        self._handoff = handoff
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handing_off = False
        self._handoff_task: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.gateway.draining = True
        loop = self._loop
        if self._handoff is not None and loop is not None and not self._handing_off:
            # still listening: streams finish and KV exports are served (gateway.http.handoff)
            self._handing_off = True
            loop.call_soon_threadsafe(self._begin_handoff)
            return
        super().handle_exit(sig, frame)  # a second signal: stop at once

    def _begin_handoff(self) -> None:
        assert self._handoff is not None
        drain_s = float(self.config.timeout_graceful_shutdown or 0)

        async def hand_off() -> None:
            try:
                await drain_and_hand_off(self.gateway, drain_s, self._handoff or Handoff())
            finally:
                self.should_exit = True

        self._handoff_task = asyncio.get_running_loop().create_task(hand_off())

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the signal after shutdown, which would make a clean drain
        # exit with -SIGTERM; we handle it and exit 0 instead
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def serve(
    app: object,
    gateway: Gateway,
    host: str,
    port: int,
    drain_timeout_s: float,
    limits: EdgeLimits | None = None,
    sock: socket.socket | None = None,
    handoff: Handoff | None = None,
) -> int:
    """Run until signalled; the exit code is 0 after a clean drain. ``sock``: an already
    listening socket to serve (a worker of :mod:`gateway.http.workers`) instead of binding
    ``host:port``. ``handoff``: keep listening after the streams end, for KV exports
    (:mod:`gateway.http.handoff`)."""
    config = EdgeConfig(
        app,
        fit_descriptors(limits or EdgeLimits()),
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        # the peer is the client: X-Forwarded-For is read only where a configured proxy
        # sent it (http.trusted_proxies), never on uvicorn's word that loopback is one
        proxy_headers=False,
        timeout_graceful_shutdown=int(drain_timeout_s),
        # a WebSocket that negotiates permessage-deflate allocates zlib's state for its
        # life; a worker serving one-turn sockets grew several KB of resident memory per
        # socket with it, and stays flat without (the events are small JSON)
        ws_per_message_deflate=False,
    )
    server = DrainingServer(config, gateway, handoff)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)
    keep_large_buffers()
    server.run(sockets=None if sock is None else [sock])
    return 0 if server.started else 1


def fit_descriptors(limits: EdgeLimits) -> EdgeLimits:
    """``limits`` with a connection cap the process can hold: each connection may need a
    second descriptor upstream. Raises the soft descriptor limit toward the hard one first."""
    wanted = 2 * limits.max_connections + _RESERVED_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return limits
    fitted = max(1, (soft - _RESERVED_FDS) // 2)
    log.warning(
        "max_connections_lowered",
        requested=limits.max_connections,
        max_connections=fitted,
        reason=f"the file descriptor limit is {soft} (ulimit -n)",
    )
    return dataclasses.replace(limits, max_connections=fitted)


def keep_large_buffers(environ: Mapping[str, str] = os.environ) -> bool:
    """Let glibc reuse freed large buffers instead of mapping fresh pages for each large
    request (see ``_MMAP_THRESHOLD``); False where it does not apply (not glibc, or the
    environment sets malloc's thresholds itself)."""
    if any(name in environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mapped: int = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    trimmed: int = mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    return mapped == 1 and trimmed == 1
