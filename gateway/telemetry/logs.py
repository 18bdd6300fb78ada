"""structlog setup: JSON lines when not on a terminal, readable lines on one.

Every record reaches the stream whole, in one ``write()`` of the line with its newline on
the stream's file descriptor (:class:`WholeRecords`): with ``serve --workers N`` every
worker writes to the same stream, and a record written in parts (``print`` writes the text
and the newline separately when the stream is unbuffered, as ``PYTHONUNBUFFERED`` makes
it) lets another worker's record land in the middle of the line. On a pipe or a socket
(a container's log stream) one write is atomic only up to ``PIPE_BUF`` bytes (4 KiB), so a
longer record is cut to fit (:func:`bounded_record`): a JSON record stays one valid JSON
object, its longest strings shortened with a marker, and says ``"truncated": true``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import select
import stat
import sys
from typing import Any, TextIO

import structlog


class WholeRecords:
    """A text stream for log records that writes each ``write()`` call's text in one
    system call (looping only on a partial write), bypassing the stream's own buffer.

    A stream without a file descriptor (a test's capture) is written and flushed as is."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._limit: int | None = None
        try:
            self._fd: int | None = stream.fileno()
            mode = os.fstat(self._fd).st_mode
        except (OSError, ValueError, io.UnsupportedOperation):
            self._fd = None
            return
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):  # shared with other writers
            self._limit = select.PIPE_BUF

    def write(self, text: str) -> int:
        if self._fd is None:
            self.stream.write(text)
            self.stream.flush()
            return len(text)
        data = text.encode("utf-8", "backslashreplace")
        if self._limit is not None and len(data) > self._limit:
            data = bounded_record(text.rstrip("\n"), self._limit - 1) + b"\n"
        self.stream.flush()  # whatever else was printed goes first, in order
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        return len(text)

    def flush(self) -> None:
        return None


_MARKER = "...(+{} more)"
_KEPT = ("timestamp", "level", "event", "logger", "request_id", "trace_id")


def bounded_record(line: str, limit: int) -> bytes:
    """``line`` (one record, no newline) in at most ``limit`` bytes of UTF-8. A JSON object
    keeps its shape: its longest strings are cut (marked with how much was left out)
    until it fits, and failing that only its identifying fields are kept."""
    try:
        record = json.loads(line) if line.startswith("{") else None
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return _cut(line, limit)
    record["truncated"] = True
    for _ in range(8):
        data = json.dumps(record).encode()
        if len(data) <= limit:
            return data
        longest = max(
            (k for k, v in record.items() if isinstance(v, str)),
            key=lambda k: len(record[k]),
            default=None,
        )
        if longest is None or len(record[longest]) <= 64:
            break
        text = record[longest]
        encoded = len(json.dumps(text))  # escapes make a character up to 6 bytes
        keep = max(32, int((encoded - (len(data) - limit) - 64) * len(text) / encoded))
        record[longest] = text[:keep] + _MARKER.format(len(text) - keep)
    kept = {k: _cut(str(record[k]), 256).decode() for k in _KEPT if k in record}
    return json.dumps({**kept, "truncated": True, "bytes": len(line.encode())}).encode()[:limit]


def _cut(text: str, limit: int) -> bytes:
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return data
    marker = _MARKER.format(len(data)).encode()
    head = data[: max(0, limit - len(marker))].decode("utf-8", "ignore")
    return head.encode() + marker


def configure_logging(level: str = "info", json_logs: bool | None = None) -> None:
    """Configure structlog and route stdlib logging (uvicorn's) through the same renderer."""
    as_json = (not sys.stderr.isatty()) if json_logs is None else json_logs
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    records = WholeRecords(sys.stderr)
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # WriteLogger writes the message and its newline in one call
        logger_factory=structlog.WriteLoggerFactory(records),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(records)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
    # one line per request is ours; uvicorn's access log would duplicate it
    logging.getLogger("uvicorn.access").disabled = True
