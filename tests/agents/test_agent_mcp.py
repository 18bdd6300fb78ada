"""Claude Code, installed from npm, reaches the gateway's ``/mcp`` with the README's recipe:
``claude mcp add --transport http`` with the gateway key as a header, then ``claude mcp
list``, which connects to every configured server and lists its health. Behind ``/mcp`` is
a real MCP server over stdio (:mod:`tests.fixtures.mcp_tool_server`).

Opt-in: ``SHUNTER_AGENTS=1`` and the CLIs installed (``scripts/test-agents.sh`` does both).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.clis import Run, _run, agents_bin
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.mcp_servers import stdio_command

pytestmark = [
    pytest.mark.agents,
    pytest.mark.skipif(os.environ.get("SHUNTER_AGENTS") != "1", reason="set SHUNTER_AGENTS=1"),
]

MASTER = "sk-master-agents-mcp"


@pytest.fixture(scope="module")
def gateway(gateway_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("agents_mcp")
    config = folder / "shunter.yaml"
    server = {"tools": {"command": stdio_command()}}
    config.write_text(gateway_config.read_text() + "mcp:\n  servers: " + json.dumps(server) + "\n")
    srv = start_server(config, folder / "server.log", env={"SHUNTER_MASTER_KEY": MASTER})
    yield srv
    stop_server(srv)


def _claude(home: Path, *args: str) -> Run:
    env = {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    return _run([str(agents_bin("claude")), "mcp", *args], env, work, 60)


@pytest.mark.parametrize(("key", "connected"), [(MASTER, True), ("sk-wrong", False)])
def test_claude_code_connects_to_mcp_with_the_readme_recipe(
    gateway: Server, tmp_path: Path, key: str, connected: bool
) -> None:
    if not agents_bin("claude").exists():
        pytest.fail("the agent CLIs are not installed: run scripts/test-agents.sh")
    url = f"{gateway.base_url}/mcp"
    added = _claude(tmp_path, "add", "--transport", "http", "shunter", url,
                    "--header", f"Authorization: Bearer {key}")  # fmt: skip
    assert added.returncode == 0, added
    listed = _claude(tmp_path, "list")
    line = next((ln for ln in listed.stdout.splitlines() if ln.startswith("shunter")), "")
    assert url in line, listed
    assert ("Connected" in line and "Failed" not in line) is connected, listed
