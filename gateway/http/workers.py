"""Serving on every core: ``serve --workers N`` runs N gateway processes on one port.

Each worker is a whole gateway (its own event loop, app, backends and config watcher) with
its own listening socket on the same address (``SO_REUSEPORT``): the kernel spreads new
connections across the workers, and a worker that exits takes only its own socket's
queue with it. The workers act as one the way replicas do: keys, rate limits, budgets and
the response cache live in the shared state store, and breaker state and failure counts,
learned context lengths and live latency figures are exchanged through it; a worker that
starts (or starts again) reads them before it serves (:mod:`gateway.dispatch.health.sharing`).

Hence the two refusals (:func:`refusals`): more than one worker needs Redis (an in-memory
store per process would count every limit N times over), and cannot hold in-process
engines (each worker would load its own copy of the model into the same memory; serve
them with ``shunter worker`` and reach them as ``openai`` deployments instead).

The parent only supervises. SIGTERM or SIGINT is passed to every worker as SIGTERM (each
drains as a single process does), and a worker still running ``stop_timeout_s`` later is
killed (exit status 1: its drain was stuck); a worker that dies while the others serve is
started again, unless it exited by itself during start-up, which stops them all with its
exit status (a worker killed by a signal is always replaced).
"""

from __future__ import annotations

import contextlib
import gc
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
_POLL_S = 0.1
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


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
    stop_timeout_s: float = 60.0  # the workers' drain timeout plus their shutdown
    stopping: bool = False
    stop_deadline: float = float("inf")
    killed: set[int] = field(default_factory=set)
    status: int = 0

    def run(self) -> int:
        """Serve until every worker has exited; the exit status is the worst worker's."""
        previous = {sig: signal.signal(sig, self._stop) for sig in _STOP_SIGNALS}
        # what was imported and built before the forks is shared with every worker until
        # one writes to its pages: frozen, those objects are never walked by a worker's
        # collections (which write to each object they visit), so their pages stay shared
        gc.collect()
        gc.freeze()
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
        # a stop signal handled between the fork and the bookkeeping below would miss the
        # new worker (and, in the worker, run the parent's handler): held back until both
        # sides are set
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:  # the worker: its own process group, so a terminal's ^C reaches
                self._become_worker(slot)  # only the parent, which passes SIGTERM on
            self.children[pid] = (slot, time.monotonic())
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)

    def _become_worker(self, slot: int) -> None:
        code = 1
        try:
            os.setpgid(0, 0)
            for sig in _STOP_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
            for index, sock in enumerate(self.sockets):
                if index != slot:
                    sock.close()
            code = self.run_worker(self.sockets[slot])
        finally:
            os._exit(code)

    def _reap_one(self) -> None:
        waited = self._wait()
        if waited is None:
            return
        pid, wait_status = waited
        if pid not in self.children:
            return
        slot, started = self.children.pop(pid)
        code = os.waitstatus_to_exitcode(wait_status)
        if self.stopping:
            # one killed at the stop deadline exits 1 (a stuck drain), not -SIGKILL
            self.status = max(self.status, 1 if pid in self.killed else abs(code))
            return
        log.error("worker_exited", pid=pid, code=code)
        if code > 0 and time.monotonic() - started < _START_GRACE_S:
            # it exited on its own as it started (a port, Redis, a config it cannot serve):
            # so would the others, and a new one. Killed by a signal, it is replaced.
            self.status = code
            self._stop(signal.SIGTERM, None)
            return
        time.sleep(_RESTART_DELAY_S)
        if not self.stopping:
            self._spawn(slot)

    def _wait(self) -> tuple[int, int] | None:
        """The next worker to exit, or None after a short poll. Polled rather than waited
        for, so that a worker still running at the stop deadline (its drain is stuck) is
        killed: a blocking wait resumes after a signal handler and would wait on."""
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            self.children.clear()
            return None
        if pid != 0:
            return pid, wait_status
        if time.monotonic() >= self.stop_deadline:
            self._kill_stuck()
        time.sleep(_POLL_S)
        return None

    def _kill_stuck(self) -> None:
        for pid in list(self.children):
            log.error("worker_drain_overrun", pid=pid, waited_s=self.stop_timeout_s)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.killed.add(pid)
        self.stop_deadline = float("inf")

    def _stop(self, sig: int, frame: FrameType | None) -> None:
        if not self.stopping:
            self.stopping = True
            self.stop_deadline = time.monotonic() + self.stop_timeout_s
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
