"""Every example in README.md runs, as written, against real processes.

Each fenced block is one case:

* ``yaml``: ``shunter check-config --offline`` passes on it. A block without
  ``deployments`` is a section: it is added to the embedded default and checked so. A
  block marked ``<!-- broken: ... -->`` must fail, and the ``text`` block after it is its
  report, line for line.
* ``python``: runs against a test gateway serving the embedded default (SmolLM2), with
  ``127.0.0.1:8000`` pointed at it; the factual answer is checked.
* ``bash``: runs as one script in a work folder. A line that starts a gateway or a worker
  runs in the background on a free port until it is ready, and is stopped when the block
  ends; ``127.0.0.1:8000`` / ``:8080`` point at it.

The work folder holds what the examples name: every block marked ``<!-- file: NAME -->``,
generated GGUF files at the model paths and cache names the examples use, a model cache of
its own, values for the key variables, and a real Redis for the keys example. A block that
needs what a CI machine lacks is marked ``<!-- not run: why -->`` and listed in
:data:`NOT_RUN`, so that every block is accounted for.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest
import yaml

from gateway.cli import main
from tests.conftest import Server, free_port, start_server, stop_server
from tests.redis_server import start_redis

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

NOT_RUN = {
    "./scripts/serve.sh": "installs into .venv",
    "./scripts/test.sh": "runs this test suite",
    "./scripts/test-agents.sh": "installs the CLIs from npm",
    "./scripts/test-stack.sh": "starts a Docker engine",
    "uvx --from cyclonedx-bom==7.5.0 cyclonedx-py requirements requirements.lock --of JSON "
    "-o shunter.cdx.json": "reads the checkout's requirements.lock",
    "python3 -m venv /tmp/vllm-cpu": "downloads about 3 GB",
    'claude mcp add --transport http shunter http://localhost:8000/mcp --header "Authorization: '
    'Bearer $SHUNTER_KEY"': "needs the Claude Code and Codex CLIs",
    "shunter pull hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf": (
        "downloads a model"
    ),
}
"""First line of each block the README marks as not run, and a word of its reason."""

MODEL_FILES = (
    "models/qwen2.5-0.5b-instruct-q8_0.gguf",
    "models/llama-3.1-8b-q4_k_m.gguf",
    "models/llama-3.2-1b-instruct-q4_k_m.gguf",
    "models/model.gguf",
)
"""Model paths the examples name, relative to the folder they run in."""
CACHED_MODELS = ("qwen2.5-0.5b-instruct-q8_0", "my-70b-q4")
"""Model-cache names the examples use (what ``shunter pull`` would have stored)."""
KEY_VARIABLES = {
    "OPENAI_API_KEY": "sk-test-openai",
    "ANTHROPIC_API_KEY": "sk-test-anthropic",
    "WORKER_KEY": "sk-test-worker",
    "DOCS_MCP_TOKEN": "test-docs-token",
    "MCP_CLIENT_SECRET": "test-client-secret",
}
EXPECTED_WORDS = {"What is the capital of France?": "Paris", "Name a city": "country"}
"""A python block containing the key must print the word."""
BASH_VALUES = {
    "KEY_ID": "\"$(shunter keys list | head -n 1 | cut -d ' ' -f 1)\"",
}
_MARKER = re.compile(r"^<!--\s*([a-z ]+):\s*(.*?)\s*-->$")
_SERVER = re.compile(r"(^|\s)(shunter (serve|worker)|\./scripts/serve\.sh)(\s|$)")
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of the README: where it starts, its language, text and marker."""

    line: int
    lang: str
    text: str
    marker: tuple[str, str] | None

    @property
    def id(self) -> str:
        return f"README.md:{self.line}:{self.lang}"

    @property
    def kind(self) -> str:
        """The marker's word (``not run``, ``file``, ``broken``), or ``""``."""
        return self.marker[0] if self.marker else ""

    @property
    def detail(self) -> str:
        """What the marker says after its word."""
        return self.marker[1] if self.marker else ""


def readme_blocks() -> list[Block]:
    """Every fenced block, dedented, with the HTML comment right before it (if any)."""
    blocks, lines = [], README.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, lang, start = opening.group(1), opening.group(2), index
        index += 1
        body = []
        while lines[index].strip() != "```":
            body.append(lines[index].removeprefix(indent))
            index += 1
        previous = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        marker = _MARKER.match(previous)
        found = (marker.group(1), marker.group(2)) if marker else None
        blocks.append(Block(start + 1, lang, "\n".join(body) + "\n", found))
        index += 1
    return blocks


BLOCKS = readme_blocks()


def of(lang: str) -> list[Block]:
    """The blocks of ``lang`` that run."""
    return [b for b in BLOCKS if b.lang == lang and b.kind != "not run"]


def test_every_block_is_accounted_for() -> None:
    assert {b.lang for b in BLOCKS} <= {"yaml", "python", "bash", "text"}
    not_run = {b.text.splitlines()[0]: b.detail for b in BLOCKS if b.kind == "not run"}
    assert set(not_run) == set(NOT_RUN)
    for first_line, reason in NOT_RUN.items():
        assert reason in not_run[first_line]
    for index, block in enumerate(BLOCKS):
        assert block.kind in ("", "not run", "file", "broken"), block.id
        if block.lang == "text":  # only as the report of the broken config before it
            assert BLOCKS[index - 1].kind == "broken", block.id


@pytest.fixture(scope="module")
def workdir(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the examples run in, with the files and models they name."""
    work = tmp_path_factory.mktemp("readme")
    for relative in MODEL_FILES:
        (work / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tiny_model, work / relative)
    cache = work / "model-cache"
    cache.mkdir()
    for name in CACHED_MODELS:
        shutil.copy(tiny_model, cache / f"{name}.gguf")
    for block in BLOCKS:
        if block.kind == "file":
            (work / block.detail).write_text(block.text)
    (work / "wait_ready.py").write_text(WAIT_READY)
    return work


@pytest.fixture(scope="module")
def env(workdir: Path) -> dict[str, str]:
    """The examples' environment: their key variables, a model cache, this venv first."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {
        **os.environ,
        **KEY_VARIABLES,
        "SHUNTER_MODEL_DIR": str(workdir / "model-cache"),
        "PATH": path,
        "PYTHONUNBUFFERED": "1",
    }


@pytest.mark.parametrize("block", of("yaml"), ids=lambda b: b.id)
def test_yaml_block_passes_check_config(
    block: Block,
    workdir: Path,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("SHUNTER_MODEL_DIR", env["SHUNTER_MODEL_DIR"])
    broken = block.kind == "broken"
    for name, value in KEY_VARIABLES.items():
        if broken:  # the broken example shows what an unset variable looks like
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    path = workdir / "shunter.yaml"
    path.write_text(block.text if "deployments" in block.text else _with_default(block.text))
    code = main(["check-config", "--offline", "shunter.yaml"])
    out, err = capsys.readouterr()
    if broken:
        report = BLOCKS[BLOCKS.index(block) + 1]
        assert code == 2
        assert err.splitlines() == report.text.splitlines()
    else:
        assert code == 0, err
        assert "shunter.yaml: ok" in out


def _with_default(section: str) -> str:
    """A config section (no ``deployments``) added to the embedded default."""
    default = resources.files("gateway.config").joinpath("default.yaml").read_text()
    merged = {**yaml.safe_load(default), **yaml.safe_load(section)}
    return yaml.safe_dump(merged)


@pytest.fixture(scope="module")
def default_gateway(workdir: Path, env: dict[str, str]) -> Iterator[Server]:
    """``shunter serve`` with the embedded default, as ``./scripts/serve.sh`` runs it."""
    config = workdir / "default.yaml"
    config.write_text(resources.files("gateway.config").joinpath("default.yaml").read_text())
    server = start_server(config, workdir / "default-gateway.log", timeout_s=120, env=env)
    yield server
    stop_server(server)


@pytest.mark.parametrize("block", of("python"), ids=lambda b: b.id)
def test_python_block_runs(block: Block, default_gateway: Server, workdir: Path) -> None:
    code = block.text.replace("http://127.0.0.1:8000", default_gateway.base_url)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=workdir, timeout=120
    )
    assert done.returncode == 0, done.stderr
    for key, word in EXPECTED_WORDS.items():
        if key in block.text:
            assert word in done.stdout, done.stdout


@pytest.mark.parametrize("block", of("bash"), ids=lambda b: b.id)
def test_shell_block_runs(block: Block, workdir: Path, env: dict[str, str], tmp_path: Path) -> None:
    text = block.text
    redis = start_redis(tmp_path) if "SHUNTER_REDIS_URL" in text else None
    try:
        if redis is not None:
            text = text.replace("redis://127.0.0.1:6379/0", redis.url)
        for placeholder, value in BASH_VALUES.items():
            text = re.sub(rf"\b{placeholder}\b", value, text)
        script = _script(text, free_port())
        done = subprocess.run(
            ["bash", "-c", script],
            capture_output=True,
            text=True,
            cwd=workdir,
            env=env,
            timeout=240,
        )
    finally:
        if redis is not None:
            redis.stop()
    logs = "".join(p.read_text(errors="replace") for p in workdir.glob("server-*.log"))
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{logs}"


def _script(text: str, port: int) -> str:
    """The block as a bash script: servers started in the background on ``port``."""
    lines = ["set -euo pipefail", "SERVER=", "trap 'stop_server' EXIT", STOP_SERVER]
    servers = 0
    for line in re.sub(r"\\\n\s*", "", text).splitlines():
        line = re.sub(r"127\.0\.0\.1:80[08]0", f"127.0.0.1:{port}", line)
        if _SERVER.search(line) is None:
            lines.append(line)
            continue
        servers += 1
        command = line.split("#", 1)[0].rstrip()
        if re.search(r"--port \d+", command):
            command = re.sub(r"--port \d+", f"--port {port}", command)
        else:
            command += f" --port {port}"
        log = f"server-{port}-{servers}.log"
        lines.append(f"{command} > {log} 2>&1 &")
        lines.append("SERVER=$!")
        lines.append(f'"{sys.executable}" wait_ready.py {port} "$SERVER"')
    assert servers <= 1, "one gateway per block"
    return "\n".join(lines) + "\n"


STOP_SERVER = """\
stop_server() {
  if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" || true; fi
}"""

WAIT_READY = """\
import sys, time
import httpx

port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        if httpx.get(f"http://127.0.0.1:{port}/health/readiness", timeout=1).status_code == 200:
            sys.exit(0)
    except httpx.TransportError:
        pass
    try:
        import os
        os.kill(pid, 0)
    except OSError:
        sys.exit(f"the server (pid {pid}) exited before it was ready")
    time.sleep(0.1)
sys.exit("the server was not ready in 120 s")
"""
