"""The documentation's drop-vs-refuse tables list every row of each API's table, with
the same fate."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.apis.anthropic.fields import messages_fields
from gateway.apis.responses.fields import responses_fields
from gateway.protocol.fieldrules import FieldRules

DOC = Path(__file__).parents[3] / "docs" / "translation.md"


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


@pytest.mark.parametrize(
    ("title", "rules"),
    [("Messages → chat", messages_fields()), ("Responses → chat", responses_fields())],
)
def test_every_classified_field_is_in_the_docs(title: str, rules: FieldRules) -> None:
    rows = [line for line in _section(title).splitlines() if line.startswith("| ")]
    for rule in rules:
        found = [
            row
            for row in rows
            if f"| `{rule.name}` | {rule.fate} |" in row and rule.place in row.split("|")[1]
        ]
        assert found, f"{rules.api}: {rule.place} {rule.name} ({rule.fate}) is not documented"
