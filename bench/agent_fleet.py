"""The processes ``bench/agent_replay.py`` runs on loopback: ``shunter worker`` engines, the
priced API (:mod:`bench.agent_api`) and ``shunter serve`` in front of them.

Every process is started inside a context manager that terminates it (then kills it) on
the way out, errors and Ctrl-C included; a ``SIGTERM`` to the bench is turned into
``SystemExit`` by its ``main`` so that the same exits run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import yaml

from bench.agent_api import MODEL as API_MODEL
from bench.agent_api import ApiProfile
from bench.llamacpp_batching import free_port

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_MODEL = "agent"
ENGINE_MODEL = "bench"
READY_S = 180.0  # a model loads, a gateway checks its upstreams


@dataclass(frozen=True)
class FleetSpec:
    """The engines and the API behind the gateway."""

    model: Path
    workers: int = 2
    parallel: int = 4
    ctx: int = 6144
    threads: int = 1
    usd_per_hour: float = 0.15  # each local engine, billed for the run's wall time
    api: ApiProfile = field(default_factory=ApiProfile)


@dataclass(frozen=True)
class Fleet:
    """Where the running processes listen."""

    gateway: str
    workers: dict[str, str]  # deployment name -> base URL
    api: str


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def worker_command(spec: FleetSpec, port: int) -> list[str]:
    """``shunter worker`` serving the bench's GGUF (prefix cache on: the engine's default)."""
    return [
        *(sys.executable, "-m", "gateway.cli", "worker", "--model", str(spec.model)),
        *("--name", ENGINE_MODEL, "--parallel", str(spec.parallel), "--ctx", str(spec.ctx)),
        *("--threads", str(spec.threads), "--port", str(port), "--log-level", "warning"),
    ]


def api_command(profile: ApiProfile, port: int) -> list[str]:
    """The priced API as its own process (its event loop apart from the client's)."""
    args = [sys.executable, "-m", "bench.agent_api", "--port", str(port)]
    for name, value in asdict(profile).items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args


def gateway_config(spec: FleetSpec, workers: dict[str, str], api: str, policy: Any) -> str:
    """The YAML ``shunter serve`` reads: every engine and the API behind one model."""
    deployments: list[dict[str, Any]] = [
        {
            "name": name, "backend": "openai", "base_url": f"{url}/v1", "model": ENGINE_MODEL,
            "worker_stats": True, "context_length": spec.ctx,
            "price": {"usd_per_hour": spec.usd_per_hour},
        }
        for name, url in workers.items()
    ]  # fmt: skip
    deployments.append(
        {
            "name": "api", "backend": "openai", "base_url": f"{api}/v1", "model": API_MODEL,
            "context_length": 128_000,
            "price": {"input_per_1m": spec.api.input_per_1m,
                      "output_per_1m": spec.api.output_per_1m},
        }
    )  # fmt: skip
    # a mapping instead of a list: no policy line (the default), with these route fields
    line = dict(policy) if isinstance(policy, dict) else {"policy": policy}
    model = {"candidates": [*workers, "api"], **line, "fallback": True}
    config = {"deployments": deployments, "models": {PUBLIC_MODEL: model}}
    return yaml.safe_dump(config, sort_keys=False)


def check_config(text: str, folder: Path) -> str | None:
    """What ``shunter check-config --offline`` finds in ``text``: ``None`` when valid."""
    from gateway.config.checks import check_config as check

    path = folder / "check.yaml"
    path.write_text(text)
    issues = check(path, serving=False, network=False).issues
    return "; ".join(str(issue) for issue in issues) or None


def _wait_ready(name: str, process: subprocess.Popen[bytes], base: str, logs: Path) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited; see {logs / (name + '.log')}")
        try:
            if httpx.get(f"{base}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{name} not ready after {READY_S:g} s; see {logs / (name + '.log')}")


@contextmanager
def processes(
    commands: dict[str, tuple[list[str], int]], logs: Path, cwd: Path
) -> Iterator[dict[str, str]]:
    """Start every command at once (name -> command and its port), wait until each answers
    ``GET /v1/models``, yield their base URLs; terminate them all on the way out."""
    started: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []
    bases = {name: f"http://127.0.0.1:{port}" for name, (_, port) in commands.items()}
    try:
        for name, (command, _) in commands.items():
            log = (logs / f"{name}.log").open("wb")
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=cwd
            )
            started.append((process, log))
        for (name, base), (process, _) in zip(bases.items(), started, strict=True):
            _wait_ready(name, process, base, logs)
        yield bases
    finally:
        for process, _ in started:
            process.terminate()
        for process, output in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            output.close()


@contextmanager
def engines(spec: FleetSpec, logs: Path) -> Iterator[tuple[dict[str, str], str]]:
    """Start the workers and the API; yield their base URLs; stop them on the way out."""
    commands = {}
    for i in range(spec.workers):
        port = free_port()
        commands[f"w{i}"] = (worker_command(spec, port), port)
    port = free_port()
    commands["api"] = (api_command(spec.api, port), port)
    with processes(commands, logs, ROOT) as bases:
        api = bases.pop("api")
        yield bases, api


@contextmanager
def gateway(config: str, logs: Path, label: str) -> Iterator[str]:
    """``shunter serve`` on ``config``; yields its base URL."""
    path = logs / f"{label}.yaml"
    path.write_text(config)
    port = free_port()
    command = [
        *(sys.executable, "-m", "gateway.cli", "serve", "--config", str(path)),
        *("--port", str(port), "--log-level", "warning"),
    ]
    with processes({f"gateway-{label}": (command, port)}, logs, logs) as bases:
        yield bases[f"gateway-{label}"]


def worker_stats(workers: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each worker's live figures (``GET /v1/worker/stats``, its one deployment)."""
    out: dict[str, dict[str, Any]] = {}
    for name, url in workers.items():
        body = httpx.get(f"{url}/v1/worker/stats", timeout=10).json()
        (out[name],) = body["deployments"].values()
    return out


def api_served(api: str) -> dict[str, Any]:
    """What the API served so far (its ``/stats``)."""
    answer: dict[str, Any] = httpx.get(f"{api}/stats", timeout=10).json()
    return answer


def policy_steps(text: str, ttft_ms: float) -> dict[str, Any]:
    """The policies file: ``name: [steps]`` (or ``name: {route fields}``: no policy line,
    the default), ``$TTFT_MS`` replaced by the SLO target."""
    loaded = yaml.safe_load(text.replace("$TTFT_MS", f"{ttft_ms:g}"))
    if not isinstance(loaded, dict) or not all(isinstance(v, list | dict) for v in loaded.values()):
        raise ValueError("a policies file maps names to lists of policy steps (or route fields)")
    return loaded


def describe(policy: Sequence[Any]) -> str:
    """A policy as one line of YAML flow style."""
    return json.dumps(list(policy)).replace('"', "")
