"""Starting a serving command: refuse early, and say why in one line per problem.

Before anything binds a port, :func:`preflight` runs the machine checks of
:mod:`gateway.config.checks` (model files, API key variables, devices, engines). What can
only fail once the engines start (a GGUF llama.cpp cannot load, an engine out of memory) is
reported by uvicorn as a whole traceback; :class:`BriefStartupErrors` cuts it down to the
exception's own message unless the log level is ``debug``.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from gateway.config.checks import check_config
from gateway.config.loading import LoadedConfig, report

_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Group)): (.+)$")
_STARTUP_LOGGER = "uvicorn.error"


def preflight(path: Path | None) -> LoadedConfig | None:
    """The config at ``path`` (``None``: the embedded default) if this machine can serve
    it; otherwise ``None``, with every problem printed to stderr, one line each."""
    found = check_config(path, serving=True, network=False)
    report(found.issues)
    return found.loaded


def brief_startup_errors(log_level: str) -> None:
    """Below ``debug``, log a failed start as its exception's message, not a traceback."""
    if log_level.lower() != "debug":
        logging.getLogger(_STARTUP_LOGGER).addFilter(BriefStartupErrors())


class BriefStartupErrors(logging.Filter):
    """Rewrites a traceback logged as a message (uvicorn logs the application's start-up
    failure that way) to its innermost ``Type: message`` line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "Traceback (most recent call last)" in message:
            record.msg = (
                f"start-up failed: {last_exception(message)} (--log-level debug: traceback)"
            )
            record.args = None
        return True


def last_exception(traceback_text: str) -> str:
    """The last ``Type: message`` line of a formatted traceback (exception groups too)."""
    found = "see the log above"
    for raw in traceback_text.splitlines():
        line = raw.strip().lstrip("|").strip()
        match = _EXCEPTION_LINE.match(line)
        if match is not None and not match.group(1).endswith("Group"):
            found = f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2)}"
    return found
