"""structlog setup: JSON lines when not on a terminal, readable lines on one.

Every record reaches the stream whole, in one ``write()`` of the line with its newline on
the stream's file descriptor (:class:`WholeRecords`): with ``serve --workers N`` every
worker writes to the same stream, and a record written in parts (``print`` writes the text
and the newline separately when the stream is unbuffered, as ``PYTHONUNBUFFERED`` makes
it) lets another worker's record land in the middle of the line.
"""

from __future__ import annotations

import io
import logging
import os
import sys
from typing import Any, TextIO

import structlog


class WholeRecords:
    """A text stream for log records that writes each ``write()`` call's text in one
    system call (looping only on a partial write), bypassing the stream's own buffer.

    A stream without a file descriptor (a test's capture) is written and flushed as is."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        try:
            self._fd: int | None = stream.fileno()
        except (OSError, ValueError, io.UnsupportedOperation):
            self._fd = None

    def write(self, text: str) -> int:
        if self._fd is None:
            self.stream.write(text)
            self.stream.flush()
            return len(text)
        data = text.encode("utf-8", "backslashreplace")
        self.stream.flush()  # whatever else was printed goes first, in order
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        return len(text)

    def flush(self) -> None:
        return None


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
