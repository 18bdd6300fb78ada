"""Log records reach the stream whole: one write per record, however the stream buffers,
so that records of several worker processes sharing it never merge onto one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from gateway.telemetry.logs import bounded_record

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


BIG_RECORDS = """
import structlog
from gateway.telemetry.logs import configure_logging
configure_logging("info", json_logs=True)
log = structlog.get_logger("t")
for i in range(200):
    log.info("big", worker={worker}, i=i, text="é" * 3000 + "x" * 20000)
"""


def test_big_records_of_two_workers_on_one_pipe_never_interleave() -> None:
    read_end, write_end = os.pipe()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", BIG_RECORDS.format(worker=n)],
            stderr=write_end,
            env=env,
        )
        for n in (1, 2)
    ]
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        while chunk := os.read(pipe.fileno(), 1 << 12):
            chunks.append(chunk)
            time.sleep(0.0005)  # slowly, so that the pipe fills up and writers wait in turn
    for worker in workers:
        assert worker.wait(timeout=60) == 0
    lines = b"".join(chunks).decode().splitlines()
    records = [json.loads(line) for line in lines]  # each line is one whole record
    assert len(records) == 400
    assert sorted((r["worker"], r["i"]) for r in records) == [
        (w, i) for w in (1, 2) for i in range(200)
    ]
    assert all(len(line.encode()) < 4096 for line in lines)
    assert all(r["truncated"] for r in records)
    assert all(r["text"].startswith("é" * 100) and "more)" in r["text"] for r in records)


def test_a_record_too_long_for_one_write_keeps_its_shape() -> None:
    crowded = json.dumps({"event": "e", "level": "info", **{f"f{i}": "y" * 60 for i in range(99)}})
    kept = json.loads(bounded_record(crowded, 4095))
    assert kept == {"event": "e", "level": "info", "truncated": True, "bytes": len(crowded)}
    plain = bounded_record("a console line " + "z" * 9000, 4095)
    assert len(plain) <= 4095 and plain.startswith(b"a console line") and plain.endswith(b"more)")
