"""Typed gateway configuration, loaded from YAML with file:line:field errors."""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from backends.registry import BACKEND_KINDS, DeploymentConfig
from gateway.cache import CacheRule
from gateway.placement import DeviceSpec
from gateway.reliability import ReliabilitySettings
from gateway.residency import LocalModelsSettings
from policies.policy import Policy, PolicyField


class ModelRoute(BaseModel):
    """A public model name: the deployments that can serve it and how to pick one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidates: list[str] = Field(min_length=1)
    policy: PolicyField = Field(default_factory=Policy.default)
    fallback: bool = True
    cache: CacheRule | None = None


class GatewayConfig(BaseModel):
    """The whole routing configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    devices: list[DeviceSpec] = Field(default_factory=list)
    deployments: list[DeploymentConfig] = Field(min_length=1)
    models: dict[str, ModelRoute] = Field(min_length=1)
    reliability: ReliabilitySettings = ReliabilitySettings()
    local_models: LocalModelsSettings = LocalModelsSettings()

    @model_validator(mode="after")
    def _references_resolve(self) -> GatewayConfig:
        names = [d.name for d in self.deployments]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"deployment names must be unique; repeated: {', '.join(duplicates)}")
        known = set(names)
        for model, route in self.models.items():
            missing = [c for c in route.candidates if c not in known]
            if missing:
                raise ValueError(f"model {model!r} names unknown deployments: {', '.join(missing)}")
        return self

    @functools.cached_property
    def _by_name(self) -> dict[str, DeploymentConfig]:
        return {d.name: d for d in self.deployments}

    def deployment(self, name: str) -> DeploymentConfig:
        return self._by_name[name]


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
    text = resources.files("gateway").joinpath("default_config.yaml").read_text(encoding="utf-8")
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
