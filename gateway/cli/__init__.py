"""The ``shunter`` command line: one module per command group, on top of everything."""

from gateway.cli.main import main

__all__ = ["main"]
