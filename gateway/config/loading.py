"""Loading a config: YAML in, :class:`GatewayConfig` out, or every problem as
``file:line: field: message``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from backends.registry import BACKEND_KINDS
from gateway.config.schema import GatewayConfig


@dataclass(frozen=True)
class ConfigIssue:
    """One problem found in a config file, located as precisely as the YAML allows."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.field}: {self.message}"


class ConfigError(Exception):
    """A config that cannot be used; ``issues`` says where and why."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


def load_config(path: Path) -> GatewayConfig:
    """Read and validate ``path``; raise :class:`ConfigError` naming file, line and field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigIssue(str(path), None, "-", f"cannot read file: {exc}")]) from exc
    return parse_config(text, str(path))


def load_or_report(path: Path | None) -> GatewayConfig | None:
    """``path`` (or the embedded default) validated; problems are printed to stderr."""
    try:
        return load_config(path) if path is not None else default_config()
    except ConfigError as exc:
        for issue in exc.issues:
            print(f"error: {issue}", file=sys.stderr)
        return None


def parse_config(text: str, filename: str) -> GatewayConfig:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigIssue(filename, line, "-", f"invalid YAML: {problem}")]) from exc
    if not isinstance(data, dict):
        raise ConfigError([ConfigIssue(filename, 1, "-", "the top level must be a mapping")])
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_issues_from(exc, node, filename)) from exc


def default_config() -> GatewayConfig:
    """The embedded default: one generated demo model served in-process by llama.cpp."""
    text = resources.files("gateway.config").joinpath("default.yaml").read_text(encoding="utf-8")
    return parse_config(text, "<embedded default>")


def _issues_from(exc: ValidationError, root: yaml.Node | None, filename: str) -> list[ConfigIssue]:
    issues = []
    for error in exc.errors():
        loc = [part for part in error["loc"] if not _is_union_tag(part)]
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc.append("backend")  # point at the field that picks the backend kind
        field = ".".join(str(p) for p in loc) or "-"
        issues.append(ConfigIssue(filename, _line_of(root, loc), field, error["msg"]))
    return issues


def _is_union_tag(part: int | str) -> bool:
    # pydantic inserts the discriminator value (e.g. "llamacpp") into error locations
    return isinstance(part, str) and part in BACKEND_KINDS


def _line_of(node: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """Walk the YAML node tree along ``loc``; return the deepest line reached (1-based)."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in loc:
        child = _child(node, part)
        if child is None:
            break
        node, line = child, child.start_mark.line + 1
    return line


def _child(node: yaml.Node, part: int | str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(part):
                child: yaml.Node = value
                return child
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        item: yaml.Node = node.value[part]
        return item
    return None
