"""Loading a config: YAML in, :class:`GatewayConfig` out, or every problem at once as
``file:line: field: message``.

One pass finds them all: the schema's errors (types, ranges, unknown keys, policy steps)
and the references between sections (a candidate naming no deployment, two deployments
with one name), each located at the entry that is wrong, not at the section around it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from backends.registry import BACKEND_KINDS
from gateway.config.hints import KeyHints, did_you_mean
from gateway.config.schema import SKIP_REFERENCES, GatewayConfig
from policies.policy import Policy

DEFAULT_SOURCE = "<embedded default>"
Location = Sequence[int | str]
_STEP_MESSAGES = ("policy step", "policy has no steps")


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
    """A config that cannot be used; ``issues`` says where and why. ``loaded`` is the
    config as far as it validated when only references between sections are wrong (so
    that the machine checks can still report their problems in the same pass)."""

    def __init__(self, issues: Sequence[ConfigIssue], loaded: LoadedConfig | None = None) -> None:
        self.issues = list(issues)
        self.loaded = loaded
        super().__init__("\n".join(str(i) for i in self.issues))


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config with the YAML it came from, so that later checks (files,
    environment, network) can name the line of what they find wrong."""

    config: GatewayConfig
    source: str
    root: yaml.Node | None

    def issue(self, loc: Location, message: str) -> ConfigIssue:
        """A problem with the value at ``loc`` (e.g. ``("deployments", 0, "model")``)."""
        field = ".".join(str(p) for p in loc) or "-"
        return ConfigIssue(self.source, _line_of(self.root, loc), field, message)


def load_config(path: Path) -> GatewayConfig:
    """Read and validate ``path``; raise :class:`ConfigError` naming file, line and field."""
    return read_config(path).config


def read_config(path: Path | None) -> LoadedConfig:
    """``path`` (``None``: the embedded default) read and validated, with its YAML nodes."""
    if path is None:
        return _parse(_default_text(), DEFAULT_SOURCE)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([ConfigIssue(str(path), None, "-", f"cannot read file: {exc}")]) from exc
    return _parse(text, str(path))


def load_or_report(path: Path | None) -> GatewayConfig | None:
    """``path`` (or the embedded default) validated; problems are printed to stderr."""
    loaded = read_or_report(path)
    return None if loaded is None else loaded.config


def read_or_report(path: Path | None) -> LoadedConfig | None:
    """Like :func:`read_config`, but every problem goes to stderr, one line each."""
    try:
        return read_config(path)
    except ConfigError as exc:
        report(exc.issues)
        return None


def report(issues: Sequence[ConfigIssue]) -> None:
    """Print ``error: file:line: field: message`` lines to stderr."""
    for issue in issues:
        print(f"error: {issue}", file=sys.stderr)


def parse_config(text: str, filename: str) -> GatewayConfig:
    """Validate YAML ``text``; ``filename`` names it in errors."""
    return _parse(text, filename).config


def default_config() -> GatewayConfig:
    """The embedded default: SmolLM2 (``package:smollm2``) served in-process by llama.cpp."""
    return _parse(_default_text(), DEFAULT_SOURCE).config


def _default_text() -> str:
    return resources.files("gateway.config").joinpath("default.yaml").read_text(encoding="utf-8")


def _parse(text: str, filename: str) -> LoadedConfig:
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
    found = [*_reference_problems(data), *_policy_problems(data)]
    try:
        config = GatewayConfig.model_validate(data, context={SKIP_REFERENCES: True})
    except ValidationError as exc:
        found.extend(_schema_problems(exc))
        raise ConfigError(_located(found, node, filename)) from exc
    loaded = LoadedConfig(config, filename, node)
    if found:
        raise ConfigError(_located(found, node, filename), loaded)
    return loaded


def _located(
    found: Sequence[tuple[Location, str]], root: yaml.Node | None, filename: str
) -> list[ConfigIssue]:
    """Problems in file order, each once."""
    issues: dict[tuple[str, str], ConfigIssue] = {}
    for loc, message in found:
        field = ".".join(str(p) for p in loc) or "-"
        issues.setdefault(
            (field, message), ConfigIssue(filename, _line_of(root, loc), field, message)
        )
    return sorted(issues.values(), key=lambda i: (i.line or 0, i.field))


def _schema_problems(exc: ValidationError) -> list[tuple[Location, str]]:
    found: list[tuple[Location, str]] = []
    hints: KeyHints | None = None
    for error in exc.errors():
        loc = [part for part in _without_tags(error["loc"]) if part != "[key]"]
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc.append("backend")  # point at the field that picks the backend kind
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            hints = hints or KeyHints(GatewayConfig)
            message += hints.hint(error["loc"])
        if loc and loc[-1] == "policy" and message.startswith(_STEP_MESSAGES):
            continue  # each bad step is reported at its own line by _policy_problems
        found.append((loc, message))
    return found


def _reference_problems(data: Mapping[str, Any]) -> list[tuple[Location, str]]:
    """Deployment names used twice, and candidates that name no deployment."""
    found: list[tuple[Location, str]] = []
    first_use: dict[str, int] = {}
    deployments = data.get("deployments")
    for index, entry in enumerate(deployments if isinstance(deployments, list) else []):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            continue
        if name in first_use:
            where = f"deployments.{first_use[name]}"
            found.append(
                (("deployments", index, "name"), f"{name!r} is already the name of {where}")
            )
        else:
            first_use[name] = index
    models = data.get("models")
    for model, route in (models if isinstance(models, dict) else {}).items():
        candidates = route.get("candidates") if isinstance(route, dict) else None
        for index, candidate in enumerate(candidates if isinstance(candidates, list) else []):
            if isinstance(candidate, str) and candidate not in first_use:
                loc = ("models", model, "candidates", index)
                found.append((loc, _unknown_deployment(candidate, list(first_use))))
    found.extend(_mcp_reference_problems(data))
    return found


def _mcp_reference_problems(data: Mapping[str, Any]) -> list[tuple[Location, str]]:
    """Models whose ``mcp_tools`` name a server that ``mcp.servers`` does not configure."""
    mcp = data.get("mcp")
    servers = mcp.get("servers") if isinstance(mcp, dict) else None
    known = list(servers) if isinstance(servers, dict) else []
    found: list[tuple[Location, str]] = []
    models = data.get("models")
    for model, route in (models if isinstance(models, dict) else {}).items():
        grant = route.get("mcp_tools") if isinstance(route, dict) else None
        for server in grant if isinstance(grant, dict) else {}:
            if server not in known:
                listed = ", ".join(known) if known else "none"
                message = f"no MCP server is named {server!r} (mcp.servers: {listed})"
                found.append((("models", model, "mcp_tools", server), message))
    return found


def _unknown_deployment(name: str, known: list[str]) -> str:
    listed = ", ".join(known) if known else "none"
    return f"no deployment is named {name!r} (deployments: {listed}){did_you_mean(name, known)}"


def _policy_problems(data: Mapping[str, Any]) -> list[tuple[Location, str]]:
    """Every bad step of every policy, each at its own line (the policy parser stops at the
    first one it meets)."""
    found: list[tuple[Location, str]] = []
    models = data.get("models")
    for model, route in (models if isinstance(models, dict) else {}).items():
        steps = route.get("policy") if isinstance(route, dict) else None
        if not isinstance(steps, list):
            continue  # absent (the default policy) or not a list: the schema says so
        for index, step in enumerate(steps):
            try:
                Policy.parse([step])
            except ValueError as exc:
                message = str(exc)
                if message != "policy has no steps":  # a lone hedge: fine beside other steps
                    loc = ("models", model, "policy", index)
                    found.append((loc, re.sub(r"^policy step 0\b", f"step {index}", message)))
        if all(_is_hedge(step) for step in steps):
            found.append((("models", model, "policy"), "policy has no steps"))
    return found


def _is_hedge(step: object) -> bool:
    return isinstance(step, dict) and list(step) == ["hedge"]


def _without_tags(loc: Sequence[int | str]) -> list[int | str]:
    """``loc`` without the discriminator values pydantic puts in it."""
    if tuple(loc[:2]) == ("mcp", "servers") and len(loc) > 3 and loc[3] in ("stdio", "http"):
        return [*loc[:3], *loc[4:]]  # a server's name may be anything, a backend's kind too
    return [part for part in loc if not _is_union_tag(part)]


def _is_union_tag(part: int | str) -> bool:
    # pydantic inserts the discriminator value (e.g. "llamacpp") into error locations
    return isinstance(part, str) and part in BACKEND_KINDS


def _line_of(node: yaml.Node | None, loc: Location) -> int | None:
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
