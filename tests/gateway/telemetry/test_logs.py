"""Log records reach the stream whole: one write per record, however the stream buffers,
so that records of several worker processes sharing it never merge onto one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

LOGGING_PROCESS = """
import logging, structlog
from gateway.telemetry.logs import configure_logging
configure_logging("info", json_logs=True)
structlog.get_logger("t").info("first", n=1)
logging.getLogger("uvicorn.error").warning("second %s", 2)
structlog.get_logger("t").info("third", text="x" * 3000)
"""


def test_each_record_is_one_write_with_its_newline() -> None:
    # a datagram socket keeps write() boundaries: each datagram is what one write sent
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with ours, theirs:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        # unbuffered, as containers run it (PYTHONUNBUFFERED), is where print() writes
        # the text and its newline apart
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        child = subprocess.run(
            [sys.executable, "-c", LOGGING_PROCESS], stderr=theirs.fileno(), env=env, timeout=60
        )
        assert child.returncode == 0
        ours.setblocking(False)
        writes = []
        while True:
            try:
                writes.append(ours.recv(1 << 16).decode())
            except BlockingIOError:
                break
    assert len(writes) == 3
    assert all(w.endswith("\n") and w.count("\n") == 1 for w in writes)
    events = [json.loads(w)["event"] for w in writes]
    assert events == ["first", "second 2", "third"]
