"""The parent of `serve --workers N`: a worker whose drain never ends is killed at the
stop deadline, so the parent always exits (a real fork, real signals)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

STUCK_WORKERS = textwrap.dedent(
    """
    import os, signal, sys, time
    from gateway.http.workers import Supervisor, listening_sockets

    def stuck(sock):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a drain that never ends
        os.write(1, b"worker up\\n")  # one write: two workers share the pipe
        while True:
            time.sleep(1)

    sockets = listening_sockets("127.0.0.1", 0, 2)
    sys.exit(Supervisor(stuck, sockets, stop_timeout_s=float(sys.argv[1])).run())
    """
)


def test_a_worker_stuck_in_its_drain_is_killed_at_the_stop_deadline() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", STUCK_WORKERS, "1.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as parent:
        try:
            assert parent.stdout is not None
            started = ""
            while started.count("worker up") < 2 and (line := parent.stdout.readline()):
                started += line
            assert started.count("worker up") == 2, started
            stopped_at = time.monotonic()
            parent.send_signal(signal.SIGTERM)
            code = parent.wait(timeout=60)
            waited = time.monotonic() - stopped_at
            output = parent.stdout.read()
        finally:
            if parent.poll() is None:
                parent.kill()
    assert code == 1, output  # not 0: the drain did not finish
    assert output.count("worker_drain_overrun") == 2, output
    assert waited >= 1.0
