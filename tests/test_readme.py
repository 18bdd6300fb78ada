"""Every example in README.md and in the documentation pages (docs/*.md) runs, as
written, against real processes.

Each fenced block is one case:

* ``yaml``: ``shunter check-config --offline`` passes on it. A block without
  ``deployments`` is a section: it is added to the embedded default and checked so. A
  block marked ``<!-- broken: ... -->`` must fail, and the ``text`` block after it is its
  report, line for line.
* ``python``: runs against a test gateway serving the embedded default (SmolLM2), with
  ``127.0.0.1:8000`` pointed at it; the factual answer is checked.
* ``bash``: runs as one script in a work folder, in a process group of its own that is
  ended (SIGTERM, then SIGKILL) when the script ends or times out. A line that starts a
  gateway or a worker runs in the background on a free port until it is ready, and is
  stopped when the block ends; ``127.0.0.1:8000`` / ``:8080`` point at it. A block that
  starts none talks to the test gateway serving the embedded default, and
  ``.venv/bin/python`` is this test's Python; the factual answer is checked.

The work folder holds what the examples name: every block marked ``<!-- file: NAME -->``,
generated GGUF files at the model paths and cache names the examples use, a model cache of
its own, values for the key variables, and a real Redis for the keys example. A block that
needs what a CI machine lacks is marked ``<!-- not run: why -->`` and listed in
:data:`NOT_RUN`, so that every block is accounted for.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.cli import main
from tests.conftest import Server, free_port, start_server, stop_server
from tests.redis_server import start_redis

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
"""The files whose examples run: the README and every page of the documentation site."""

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
    "mkdir -p ~/.gemini": "needs the Gemini CLI",
    'curl -s -H "authorization: Bearer $KEY" http://a:8080/v1/worker/kv/$LINK \\': (
        "needs two workers"
    ),
    "shunter pull hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf": (
        "downloads a model"
    ),
}
"""First line of each block a page marks as not run, and a word of its reason."""

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
    "GEMINI_API_KEY": "test-gemini-key",
    "WORKER_KEY": "sk-test-worker",
    "DOCS_MCP_TOKEN": "test-docs-token",
    "MCP_CLIENT_SECRET": "test-client-secret",
}
EXPECTED_WORDS = {
    "What is the capital of France?": "Paris",
    "And of Italy?": "Rome",
    "What is the capital of Spain?": "Madrid",
    "Name a city": "country",
    "What is the weather in Paris?": "It is sunny in Paris.",
}
"""A python or bash block containing the key must print the word."""
LEAKS = ("<tool_response>", "<tool_call>", "<|im_start|>", "<|im_end|>")
"""Prompt framing no example may print: the gateway wrote it for the model, not the client."""
BASH_VALUES = {
    "KEY_ID": "\"$(shunter keys list | head -n 1 | cut -d ' ' -f 1)\"",
}
_MARKER = re.compile(r"^<!--\s*([a-z ]+):\s*(.*?)\s*-->$")
_SERVER = re.compile(r"(^|\s)(shunter (serve|worker)|\./scripts/serve\.sh)(\s|$)")
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it starts, its language, text and marker."""

    page: str
    line: int
    lang: str
    text: str
    marker: tuple[str, str] | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}:{self.lang}"

    @property
    def kind(self) -> str:
        """The marker's word (``not run``, ``file``, ``broken``), or ``""``."""
        return self.marker[0] if self.marker else ""

    @property
    def detail(self) -> str:
        """What the marker says after its word."""
        return self.marker[1] if self.marker else ""


def page_blocks(path: Path) -> list[Block]:
    """Every fenced block of a page, dedented, with the HTML comment right before it (if any)."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    page = str(path.relative_to(ROOT))
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
        blocks.append(Block(page, start + 1, lang, "\n".join(body) + "\n", found))
        index += 1
    return blocks


BLOCKS = [block for path in PAGES for block in page_blocks(path)]


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
    assert not [leak for leak in LEAKS if leak in done.stdout], done.stdout


def test_the_codex_recipe_says_what_the_embedded_default_answers(default_gateway: Server) -> None:
    """Codex's first request (its instructions and tools: over 10,000 tokens) to the embedded
    default, by the recipe's model name and by SmolLM2's, answers what the recipe says."""
    recipe = " ".join((ROOT / "docs" / "agent-clients.md").read_text(encoding="utf-8").split())
    codex_like = {"instructions": "You are a coding agent. " * 2000, "input": "Fix the bug."}
    answers = {}
    for model in ("coder", "smollm2"):
        url = f"{default_gateway.base_url}/v1/responses"
        reply = httpx.post(url, json={**codex_like, "model": model}, timeout=60)
        error = reply.json()["error"]
        answers[model] = (reply.status_code, error["code"], error["param"])
    assert answers == {
        "coder": (404, "model_not_found", "model"),
        "smollm2": (400, "context_length_exceeded", "input"),
    }
    assert "Codex gets a 404 `model_not_found` naming `model`" in recipe
    assert "it gets a 400 `context_length_exceeded` naming `input`" in recipe
    assert 'codex exec --skip-git-repo-check "..."' in recipe


@pytest.mark.parametrize("block", of("bash"), ids=lambda b: b.id)
def test_shell_block_runs(
    block: Block,
    workdir: Path,
    env: dict[str, str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    text = block.text.replace(".venv/bin/python", f'"{sys.executable}"')
    if not any(_SERVER.search(line) for line in text.splitlines()):
        gateway: Server = request.getfixturevalue("default_gateway")
        text = text.replace("http://127.0.0.1:8000", gateway.base_url)
    redis = start_redis(tmp_path) if "SHUNTER_REDIS_URL" in text else None
    try:
        if redis is not None:
            text = text.replace("redis://127.0.0.1:6379/0", redis.url)
        for placeholder, value in BASH_VALUES.items():
            text = re.sub(rf"\b{placeholder}\b", value, text)
        done = run_script(_script(text, free_port()), workdir, env, timeout_s=240)
    finally:
        if redis is not None:
            redis.stop()
    logs = "".join(p.read_text(errors="replace") for p in workdir.glob("server-*.log"))
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{logs}"
    for key, word in EXPECTED_WORDS.items():
        if key in block.text:
            assert word in done.stdout, done.stdout


def run_script(
    script: str, cwd: Path, env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """``bash -c script`` in a process group of its own, ended once the script is done.

    The group gets SIGTERM (the script's ``EXIT`` trap runs and stops what it started),
    then SIGKILL after a grace period, whether the script ended or ran out of time:
    nothing it started in the background outlives it. A script out of time gets
    ``returncode`` -1 and a line saying so in ``stderr``.
    """
    process = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
        code = process.returncode
    except subprocess.TimeoutExpired:
        _end_group(process.pid)
        out, err = process.communicate()
        code, err = -1, f"{err}\nthe script ran past {timeout_s} s and was ended\n"
    _end_group(process.pid)
    return subprocess.CompletedProcess(process.args, code, out, err)


def _end_group(group: int, grace_s: float = 10.0) -> None:
    """SIGTERM to every process of ``group``, then SIGKILL to what is left after ``grace_s``."""
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return  # the whole group is gone already
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_members(group):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def group_members(group: int) -> list[int]:
    """The live processes of a process group (exited ones not yet reaped do not count)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we read it
        if fields[0] != "Z" and int(fields[2]) == group:
            members.append(int(stat.parent.name))
    return members


def test_a_script_out_of_time_has_its_group_ended(tmp_path: Path) -> None:
    """What a script started in the background is ended with it, and its EXIT trap runs."""
    script = 'trap "echo stopped > trap.txt" EXIT\nsleep 300 &\necho $! > child.pid\nsleep 300\n'
    done = run_script(script, tmp_path, dict(os.environ), timeout_s=3)
    assert done.returncode == -1, done
    assert "ran past 3 s" in done.stderr
    child = int((tmp_path / "child.pid").read_text())
    assert not _running(child)
    assert (tmp_path / "trap.txt").read_text() == "stopped\n"


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


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
