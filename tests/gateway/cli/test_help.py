"""``--help`` of every ``shunter`` command: each option explained, defaults shown, plain text."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from gateway.cli.commands import _parser

MARKUP = re.compile(r"``|:(func|class|mod|meth|data):|\[/?(red|green|bold|yellow)\]")


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("shunter",)
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the command line, with the words that reach it."""
    yield path, parser
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases (models ls) share a parser
                    seen.add(id(sub))
                    yield from commands(sub, (*path, name))


ALL = list(commands(_parser()))


@pytest.mark.parametrize(("path", "parser"), ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_option_has_help_and_the_text_has_no_markup(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            continue
        assert action.help, f"{' '.join(path)} {action.option_strings or action.dest}"
    text = parser.format_help()
    assert MARKUP.search(text) is None, text


def test_defaults_are_shown(capsys: pytest.CaptureFixture[str]) -> None:
    parser = dict((" ".join(p), x) for p, x in ALL)
    serve = parser["shunter serve"].format_help()
    assert "port to listen on (default: 8000)" in " ".join(serve.split())
    assert "(default: 127.0.0.1)" in serve and "(default: 30.0)" in serve
    worker = " ".join(parser["shunter worker"].format_help().split())
    assert "sequences decoded together (default: 4)" in worker
    route = " ".join(parser["shunter route"].format_help().split())
    assert "the request's prompt size (default: 500)" in route
    assert "(default: None)" not in route and "(default: False)" not in route
    pull = parser["shunter pull"].format_help()
    assert "hf://OWNER/REPO[@REVISION]/PATH/FILE.gguf   a file" in pull  # epilog kept as written
