"""Claude Code and Codex, installed from npm, reach the gateway's ``/mcp`` with the README's
recipes. Claude Code: ``claude mcp add --transport http`` with the gateway key as a header,
then ``claude mcp list``, which connects to every configured server and lists its health.
Codex: ``codex mcp add --url --bearer-token-env-var``, then ``codex exec`` with the gateway
as its model provider too; Codex lists the server's tools when it
starts and offers them to its model, a scripted one (:mod:`tests.fixtures.agent_upstream`)
that calls one, so the answer holds the tool's result only if Codex called it through
``/mcp``. Behind ``/mcp`` is a real MCP server over stdio (:mod:`tests.fixtures.mcp_tool_server`).

Opt-in: ``SHUNTER_AGENTS=1`` and the CLIs installed (``scripts/test-agents.sh`` does both).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agents.clis import (
    CLAUDE_CODES,
    REPO,
    Run,
    _run,
    agents_bin,
    codex_config,
    package_bin,
    package_version,
)
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.agent_turns import ANSWER_PREFIX, Script
from tests.fixtures.agent_upstream import AgentUpstream
from tests.fixtures.mcp_servers import stdio_command
from tests.redis_server import start_redis

pytestmark = [
    pytest.mark.agents,
    pytest.mark.skipif(os.environ.get("SHUNTER_AGENTS") != "1", reason="set SHUNTER_AGENTS=1"),
]

MASTER = "sk-master-agents-mcp"
EVERY_TOOL = {"echo", "add", "pid", "slow", "broken", "big", "seen_headers", "leaky"}
MCP_SERVERS = "mcp:\n  servers: " + json.dumps({"tools": {"command": stdio_command()}}) + "\n"


@pytest.fixture(scope="module")
def gateway(gateway_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("agents_mcp")
    config = folder / "shunter.yaml"
    config.write_text(gateway_config.read_text() + MCP_SERVERS)
    srv = start_server(config, folder / "server.log", env={"SHUNTER_MASTER_KEY": MASTER})
    yield srv
    stop_server(srv)


def _claude(package: str, home: Path, *args: str) -> Run:
    env = {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    return _run([str(package_bin(package, "claude")), "mcp", *args], env, _workdir(home), 60)


@pytest.mark.parametrize("package", CLAUDE_CODES, ids=["pinned", "newest"])
@pytest.mark.parametrize(("key", "connected"), [(MASTER, True), ("sk-wrong", False)])
def test_claude_code_connects_to_mcp_with_the_readme_recipe(
    gateway: Server, tmp_path: Path, key: str, connected: bool, package: str
) -> None:
    if not package_version(package):
        pytest.fail("the agent CLIs are not installed: run scripts/test-agents.sh")
    url = f"{gateway.base_url}/mcp"
    added = _claude(package, tmp_path, "add", "--transport", "http", "shunter", url,
                    "--header", f"Authorization: Bearer {key}")  # fmt: skip
    assert added.returncode == 0, added
    listed = _claude(package, tmp_path, "list")
    line = next((ln for ln in listed.stdout.splitlines() if ln.startswith("shunter")), "")
    assert url in line, listed
    assert ("Connected" in line and "Failed" not in line) is connected, listed


def readme_codex_add(base_url: str) -> list[str]:
    """The arguments of the documented ``codex mcp add`` line, with the gateway at ``base_url``."""
    found = re.search(
        r"^codex (mcp add .*)$", (REPO / "docs" / "agent-clients.md").read_text(), re.M
    )
    assert found, "docs/agent-clients.md has no codex mcp add recipe"
    return shlex.split(found.group(1).replace("http://localhost:8000", base_url))


@dataclass(frozen=True)
class ScriptedGateway:
    server: Server
    upstream: AgentUpstream
    agents_key: str  # a virtual key that may use only ``tools:add``

    def offered(self) -> set[str]:
        """The names of the tools the scripted model was offered, over all its turns."""
        bodies = self.upstream.posted("/v1/chat/completions")
        return {tool["function"]["name"] for body in bodies for tool in body.get("tools") or []}


@contextlib.contextmanager
def scripted_gateway(script: Script, folder: Path) -> Iterator[ScriptedGateway]:
    """The gateway, keys in a real Redis, serving ``/mcp`` and the model ``scripted``."""
    redis = start_redis(folder)
    env = {"SHUNTER_MASTER_KEY": MASTER, "SHUNTER_REDIS_URL": redis.url}
    try:
        agents_key = _create_key(env, "--mcp", "tools:add")
        with AgentUpstream(script) as upstream:
            config = folder / "shunter.yaml"
            config.write_text(
                "deployments:\n  - {name: scripted, backend: openai, model: scripted-model, "
                f"base_url: '{upstream.url}/v1', api_key_env: SCRIPTED_UPSTREAM_KEY}}\n"
                "models:\n  scripted: {candidates: [scripted]}\n" + MCP_SERVERS
            )
            env["SCRIPTED_UPSTREAM_KEY"] = "sk-upstream"
            server = start_server(config, folder / "gateway.log", env=env)
            try:
                yield ScriptedGateway(server, upstream, agents_key)
            finally:
                stop_server(server)
    finally:
        redis.stop()


def _create_key(env: dict[str, str], *limits: str) -> str:
    """The secret of a virtual key made with ``shunter keys create``, as the README does."""
    create = [sys.executable, "-m", "gateway.cli", "keys", "create", "--name", "agents", *limits]
    made = subprocess.run(create, env={**os.environ, **env}, capture_output=True, check=True)
    return made.stdout.decode().strip()


def _codex(home: Path, key: str, *args: str) -> Run:
    env = {
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "GATEWAY_API_KEY": MASTER,  # the model provider's key
        "SHUNTER_KEY": key,  # the README recipe's key for /mcp
    }
    return _run([str(agents_bin("codex")), *args], env, _workdir(home), 90)


def _calls_answered(log: str) -> list[dict[str, Any]]:
    """The gateway's access-log lines for MCP ``tools/call`` requests answered 200."""
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [e for e in lines if e.get("rpc") == "tools/call" and e.get("status") == 200]


def _workdir(home: Path) -> Path:
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    return work


@pytest.mark.parametrize(
    ("key", "tools"),
    [("master", EVERY_TOOL), ("agents", {"add"}), ("wrong", set())],
)
def test_codex_calls_a_gateway_mcp_tool_with_the_readme_recipe(
    tmp_path: Path, key: str, tools: set[str]
) -> None:
    """The master key sees every tool; a virtual key made with ``--mcp tools:add`` only
    that one; a wrong key none (Codex runs on without the server)."""
    if not agents_bin("codex").exists():
        pytest.fail("the agent CLIs are not installed: run scripts/test-agents.sh")
    number = random.randrange(10**6, 10**7)
    script = Script("true", tool="tools__add", arguments={"a": number, "b": 1})
    home = tmp_path / "home"
    with scripted_gateway(script, tmp_path) as through:
        secret = {"master": MASTER, "agents": through.agents_key, "wrong": "sk-wrong"}[key]
        (home / ".codex").mkdir(parents=True)
        provider = codex_config(through.server.api, "custom")
        (home / ".codex" / "config.toml").write_text('model = "scripted"\n' + provider)
        url = through.server.base_url
        added = _codex(home, secret, *readme_codex_add(url))
        assert added.returncode == 0, added
        got = _codex(home, secret, "mcp", "get", "shunter", "--json")
        transport = json.loads(got.stdout)["transport"]  # the key's variable, not the key
        assert transport["url"] == f"{url}/mcp", got
        assert transport["bearer_token_env_var"] == "SHUNTER_KEY", got
        flags = ["--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        run = _codex(home, secret, "exec", *flags, "Add the numbers with the tool.")
        log = through.server.log()
        explain = f"{run}\n--- gateway log\n{log[-6000:]}"
        offered = {name.rpartition("tools__")[2] for name in through.offered() if "tools__" in name}
        assert offered == tools, explain
        answered = ANSWER_PREFIX in run.stdout and str(number + 1) in run.stdout  # the tool's sum
        assert answered is bool(tools), explain
        assert bool(_calls_answered(log)) is bool(tools), explain
