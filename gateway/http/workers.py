"""Serving on every core: ``serve --workers N`` runs N gateway processes on one port.

Each worker is a whole gateway (its own event loop, app, backends and config watcher) with
its own listening socket on the same address (``SO_REUSEPORT``): the kernel spreads new
connections across the workers, and a worker that exits takes only its own socket's
queue with it. The workers act as one the way replicas do: keys, rate limits, budgets and
the response cache live in the shared state store, and breaker state, learned context
lengths and live latency figures are exchanged through it (:mod:`gateway.dispatch.sharing`).

Hence the two refusals (:func:`refusals`): more than one worker needs Redis (an in-memory
store per process would count every limit N times over), and cannot hold in-process
engines (each worker would load its own copy of the model into the same memory; serve
them with ``shunter worker`` and reach them as ``openai`` deployments instead).

The parent only supervises. SIGTERM or SIGINT is passed to every worker as SIGTERM (each
drains as a single process does); a worker that dies while the others serve is started
again, unless it exited by itself during start-up, which stops them all with its exit
status (a worker killed by a signal is always replaced).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import FrameType

import structlog

log = structlog.get_logger("shunter.workers")
# a worker that exits sooner than this after its start failed to start: restarting it
# would only fail again
_START_GRACE_S = 5.0
_RESTART_DELAY_S = 1.0


def worker_count(value: str) -> int:
    """``--workers``: a positive number, or ``auto`` for the cores this process may use."""
    if value == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    count = int(value)
    if count < 1:
        raise ValueError("must be at least 1")
    return count


def refusals(workers: int, redis_url: str | None, in_process: Iterable[str]) -> list[str]:
    """Why ``workers`` processes cannot serve this config (empty when they can)."""
    if workers == 1:
        return []
    problems = []
    if redis_url is None:
        problems.append(
            f"--workers {workers}: workers share keys, limits, budgets and the cache through "
            "Redis; give --redis-url (or SHUNTER_REDIS_URL), or run one worker"
        )
    engines = sorted(in_process)
    if engines:
        problems.append(
            f"--workers {workers}: in-process deployments ({', '.join(engines)}) would be "
            "loaded once per worker; serve them with `shunter worker` and reach them as "
            "openai deployments, or run one worker"
        )
    return problems


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` sockets listening on one address (``SO_REUSEPORT``); raises ``OSError``
    when the address is taken, before any worker starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(2048)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


@dataclass
class Supervisor:
    """Forks one worker per socket and keeps them running until told to stop."""

    run_worker: Callable[[socket.socket], int]
    sockets: list[socket.socket]
    children: dict[int, tuple[int, float]] = field(default_factory=dict)  # pid -> slot, start
    stopping: bool = False
    status: int = 0

    def run(self) -> int:
        """Serve until every worker has exited; the exit status is the worst worker's."""
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for slot in range(len(self.sockets)):
                self._spawn(slot)
            log.info("workers_started", workers=len(self.sockets), pid=os.getpid())
            while self.children:
                self._reap_one()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for sock in self.sockets:
                sock.close()
        return self.status

    def _spawn(self, slot: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker: its own process group, so a terminal's ^C reaches
            code = 1  # only the parent, which passes SIGTERM on (one drain, not two)
            try:
                os.setpgid(0, 0)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                for index, sock in enumerate(self.sockets):
                    if index != slot:
                        sock.close()
                code = self.run_worker(self.sockets[slot])
            finally:
                os._exit(code)
        self.children[pid] = (slot, time.monotonic())

    def _reap_one(self) -> None:
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            self.children.clear()
            return
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            return
        if pid not in self.children:
            return
        slot, started = self.children.pop(pid)
        code = os.waitstatus_to_exitcode(wait_status)
        if self.stopping:
            self.status = max(self.status, abs(code))
            return
        log.error("worker_exited", pid=pid, code=code)
        if code > 0 and time.monotonic() - started < _START_GRACE_S:
            # it exited on its own as it started (a port, Redis, a config it cannot serve):
            # so would the others, and a new one. Killed by a signal, it is replaced.
            self.status = code
            self._stop(signal.SIGTERM, None)
            return
        time.sleep(_RESTART_DELAY_S)
        self._spawn(slot)

    def _stop(self, sig: int, frame: FrameType | None) -> None:
        self.stopping = True
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
