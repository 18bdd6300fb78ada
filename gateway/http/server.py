"""Running the app under uvicorn with a graceful, draining shutdown.

On SIGTERM or SIGINT: readiness turns 503 and new API requests get 503 with retry-after
(so a load balancer moves on), uvicorn stops accepting connections, in-flight requests and
streams run to completion for up to ``drain_timeout_s``, then the lifespan closes every
backend (releasing engine memory) and the process exits 0.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn

from gateway.dispatch.router import Gateway


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self.gateway = gateway

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.gateway.draining = True
        super().handle_exit(sig, frame)

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


def serve(app: object, gateway: Gateway, host: str, port: int, drain_timeout_s: float) -> int:
    """Run until signalled; the exit code is 0 after a clean drain."""
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=int(drain_timeout_s),
    )
    server = DrainingServer(config, gateway)
    server.run()
    return 0 if server.started else 1
