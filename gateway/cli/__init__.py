"""The ``shunter`` command line: one module per command group, on top of everything.

:func:`main` is the entry point. It decides one thing before anything else is imported:
a process that serves (``serve``, ``worker``) never loads what only a terminal shows.
httpx imports its own command-line tool (click, rich, pygments) and structlog its pretty
tracebacks (rich, colorama) whenever those are installed, and uvicorn its file watcher
(watchfiles) for ``--reload``; a server shows none of them, and together they took about
7 MB of every serving process. Marking them absent (``sys.modules[name] = None``, which
makes their ``import`` fail as if they were not installed) sends each library down the
plain path it already has for that case.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

SERVING_COMMANDS = frozenset({"serve", "worker"})
TERMINAL_ONLY = ("rich", "pygments", "colorama", "watchfiles")
"""Packages a serving process never imports (see the module docstring)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; ``argv`` defaults to the process's arguments.

    Only a process of its own (``argv`` not given) is made lean: a caller that passes
    arguments, such as a test, keeps every package it may want afterwards."""
    if argv is None and _command(sys.argv[1:]) in SERVING_COMMANDS:
        leave_out(TERMINAL_ONLY)
    from gateway.cli.commands import main as run

    return run(argv)


def leave_out(packages: Sequence[str]) -> None:
    """Make ``import`` of each package not yet loaded fail as if it were not installed."""
    for name in packages:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def _command(args: Sequence[str]) -> str | None:
    return next((arg for arg in args if not arg.startswith("-")), None)


__all__ = ["main"]
