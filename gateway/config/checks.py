"""What a valid config still needs from the machine it runs on, checked before serving.

The file can be right and the gateway still unable to start: a model file that is missing
or is not a GGUF, an API key variable that is not set, a device that is not there, an
engine that is not installed. :func:`check_machine` finds these, each located at the line
of the field to fix (and what the model files say about declared sizes and cascades,
:mod:`gateway.config.sizing`); :func:`check_network` (``check-config`` only, skipped by
``--offline``) asks whether each remote upstream answers at all.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from backends.llamacpp import LlamaCppSettings
from backends.registry import DeploymentConfig
from gateway.config.loading import ConfigError, ConfigIssue, LoadedConfig, read_config
from gateway.config.mcp import StdioServer
from gateway.config.sizing import cascade_issues, size_notes
from gateway.planner import Device, discover_devices, shape_from_gguf

if TYPE_CHECKING:
    import httpx

    from gateway.models.store import ModelCache

_DEMO_SIZES = ("tiny", "bench")


@dataclass
class Findings:
    """Problems that stop the gateway (``issues``), facts worth knowing (``notes``) and,
    when there is no problem, the config itself (``loaded``)."""

    issues: list[ConfigIssue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    loaded: LoadedConfig | None = None


def check_config(path: Path | None, *, serving: bool, network: bool) -> Findings:
    """Everything wrong with the config at ``path`` (``None``: the embedded default), in
    one pass and in file order: the file itself, then (as far as it validated) what it
    needs from this machine and, with ``network``, from its remote upstreams."""
    try:
        loaded: LoadedConfig | None = read_config(path)
        found = Findings()
    except ConfigError as exc:
        loaded, found = exc.loaded, Findings(list(exc.issues))
    if loaded is not None:
        machine = check_machine(loaded, serving=serving)
        found.issues += machine.issues
        found.notes += machine.notes
        if network:
            found.issues += asyncio.run(check_network(loaded))
    found.issues.sort(key=lambda issue: issue.line or 0)
    found.loaded = None if found.issues else loaded
    return found


def check_machine(
    loaded: LoadedConfig,
    *,
    serving: bool,
    discover: Callable[[], list[Device]] = discover_devices,
) -> Findings:
    """Model files, API key variables, devices and engines of every deployment.

    ``serving``: the gateway is about to start, so an engine that is not installed is a
    problem; for ``check-config`` it is a note (the settings were still checked)."""
    found = Findings()
    cache = _model_cache(loaded)
    devices = {d.name for d in loaded.config.devices} | {d.name for d in discover()}
    for index, settings in enumerate(loaded.config.deployments):
        for key, problem in _deployment_problems(settings, cache, devices, serving=serving):
            found.issues.append(loaded.issue(("deployments", index, key), problem))
        missing = None if serving else settings.engine_missing()
        if missing is not None:
            where = loaded.issue(
                ("deployments", index, "backend"), f"settings checked, but {missing}"
            )
            found.notes.append(str(where))
    found.notes += size_notes(loaded)
    found.notes += _mcp_notes(loaded)
    found.issues += cascade_issues(loaded)
    found.issues.sort(key=lambda issue: issue.line or 0)
    return found


def _model_cache(loaded: LoadedConfig) -> ModelCache | None:
    """The model cache, where a deployment reads a model file (``None``: none does, and
    the store's modules stay unloaded)."""
    if not any(isinstance(s, LlamaCppSettings) for s in loaded.config.deployments):
        return None
    from gateway.models.store import ModelCache, model_cache_dir

    return ModelCache(model_cache_dir())


def _mcp_notes(loaded: LoadedConfig) -> list[str]:
    """Stdio MCP servers whose program is not found: the gateway serves without them (their
    calls fail, a listing names them), so a note rather than a problem."""
    notes = []
    for name, server in loaded.config.mcp.servers.items():
        if not isinstance(server, StdioServer):
            continue
        program = server.command[0]
        if os.sep in program:
            base = Path(server.cwd or ".") / program
            found = base.is_file() and os.access(base, os.X_OK)
        else:
            found = shutil.which(program) is not None
        if not found:
            where = ("mcp", "servers", name, "command")
            notes.append(str(loaded.issue(where, f"{program!r} is not found: it will not start")))
    return notes


def _deployment_problems(
    settings: DeploymentConfig, cache: ModelCache | None, devices: set[str], *, serving: bool
) -> list[tuple[str, str]]:
    """(field, problem) pairs for one deployment."""
    problems: list[tuple[str, str | None]] = []
    # serving: a model loaded on demand is checked when it loads (its file may come later)
    served_soon = isinstance(settings, LlamaCppSettings) and (settings.preload or not serving)
    if served_soon and cache is not None:
        problems.append(("model", model_file_problem(cache, settings.model)))
    key_env = settings.key_variable()
    if key_env and not os.environ.get(key_env):
        problems.append(("api_key_env", _unset(key_env)))
    if settings.device is not None and settings.device not in devices:
        problems.append(("device", _no_device(settings.device, devices)))
    if serving:
        problems.append(("backend", settings.engine_missing()))
    return [(key, problem) for key, problem in problems if problem is not None]


def model_file_problem(cache: ModelCache, model: str) -> str | None:
    """Why ``model`` cannot be loaded, or ``None``: it names no file, the file cannot be
    read, is not a GGUF, or lacks part of what its header lists (a cut-off download)."""
    from gateway.models.store import GGUF_MAGIC, UnknownModelError

    if model.startswith("demo:"):
        size = model.removeprefix("demo:")
        return None if size in _DEMO_SIZES else f"unknown demo model {model!r}: use demo:tiny"
    try:
        path = cache.locate(model)
    except UnknownModelError as exc:
        return str(exc)
    try:
        with path.open("rb") as handle:
            head = handle.read(len(GGUF_MAGIC))
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if head != GGUF_MAGIC:
        return f"{path} is not a GGUF file (it starts with {head!r}, not {GGUF_MAGIC!r})"
    try:
        shape_from_gguf(path)
    except (OSError, ValueError) as exc:
        return f"{path} is not a usable GGUF file: {exc}"
    return None


async def check_network(loaded: LoadedConfig, timeout_s: float = 5.0) -> list[ConfigIssue]:
    """Whether every remote upstream answers HTTP at its ``base_url`` (any status will do:
    this asks about the road, not the key). Proxies in the environment are used."""
    import httpx

    remote = [
        (index, url)
        for index, settings in enumerate(loaded.config.deployments)
        if (url := settings.upstream_url()) is not None
    ]
    if not remote:
        return []
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        answers = await asyncio.gather(*(_reach(client, url) for _, url in remote))
    return [
        loaded.issue(("deployments", index, "base_url"), problem)
        for (index, _), problem in zip(remote, answers, strict=True)
        if problem is not None
    ]


async def _reach(client: httpx.AsyncClient, url: str) -> str | None:
    import httpx

    try:
        await client.get(url)
    except httpx.HTTPError as exc:
        detail = str(exc) or type(exc).__name__
        return f"cannot reach {url}: {detail} (--offline skips this check)"
    return None


def _unset(variable: str) -> str:
    return (
        f"the environment variable {variable} is not set (the deployment sends its value "
        f"as the API key): export {variable}=..."
    )


def _no_device(name: str, known: Iterable[str]) -> str:
    listed = ", ".join(sorted(known)) or "none"
    return (
        f"no device named {name!r} on this machine or under devices: (devices: {listed}); "
        "declare it under devices: to plan for another machine"
    )
