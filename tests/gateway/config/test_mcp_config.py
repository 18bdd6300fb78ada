"""The ``mcp:`` section: both kinds of server, secrets from the environment, and problems
named at their file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, parse_config
from gateway.config.checks import check_config
from gateway.config.mcp import HttpServer, StdioServer

BASE = """\
deployments:
  - {name: local, backend: llamacpp, model: demo:tiny}
models:
  chat:
    candidates: [local]
"""

SERVERS = """\
mcp:
  servers:
    files:
      command: [python, server.py]
      env: {API_TOKEN: "${MCP_TEST_FILES_TOKEN}"}
      tools: [read_file]
    docs:
      url: https://docs.example.com/mcp
      headers: {Authorization: "Bearer ${MCP_TEST_DOCS_TOKEN}", X-Team: blue}
      timeout_s: 5
      oauth:
        token_url: https://auth.example.com/token
        client_id: shunter
        client_secret: ${MCP_TEST_DOCS_TOKEN}
"""


def issues(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "shunter.yaml")
    return [str(issue) for issue in info.value.issues]


def test_servers_of_both_kinds_with_secrets_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCP_TEST_FILES_TOKEN", "files-secret")
    monkeypatch.setenv("MCP_TEST_DOCS_TOKEN", "docs-secret")
    config = parse_config(BASE + SERVERS, "shunter.yaml")
    files, docs = config.mcp.servers["files"], config.mcp.servers["docs"]
    assert isinstance(files, StdioServer) and isinstance(docs, HttpServer)
    assert files.env["API_TOKEN"].get_secret_value() == "files-secret"
    assert files.tools == ["read_file"] and files.timeout_s == 30 and files.max_concurrency == 8
    assert docs.headers["Authorization"].get_secret_value() == "Bearer docs-secret"
    assert docs.headers["X-Team"].get_secret_value() == "blue"
    assert docs.oauth is not None and docs.oauth.client_secret.get_secret_value() == "docs-secret"
    assert "docs-secret" not in repr(config) and "files-secret" not in repr(config)


def test_an_unset_variable_is_named_at_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TEST_FILES_TOKEN", "files-secret")
    monkeypatch.delenv("MCP_TEST_DOCS_TOKEN", raising=False)
    found = issues(BASE + SERVERS)
    assert (
        "shunter.yaml:14: mcp.servers.docs.headers.Authorization: the environment variable "
        "MCP_TEST_DOCS_TOKEN is not set"
    ) in found
    assert any(
        line.startswith("shunter.yaml:19: mcp.servers.docs.oauth.client_secret") for line in found
    )


def test_bad_servers_are_named_at_their_lines() -> None:
    found = issues(
        BASE + "mcp:\n"
        "  servers:\n"
        "    a__b: {command: [x]}\n"
        "    slow: {url: 'ftp://x', timeout_s: 0}\n"
        "    odd: {command: [x], colour: red}\n"
    )
    assert any(
        i.startswith("shunter.yaml:8: mcp.servers.a__b: 'a__b' cannot name a server") for i in found
    )
    assert any(i.startswith("shunter.yaml:9: mcp.servers.slow.url:") for i in found)
    assert any(i.startswith("shunter.yaml:9: mcp.servers.slow.timeout_s:") for i in found)
    assert any(i.startswith("shunter.yaml:10: mcp.servers.odd.colour: Extra inputs") for i in found)


def test_a_model_may_name_only_configured_servers() -> None:
    text = BASE.replace("candidates: [local]", "candidates: [local]\n    mcp_tools: {nope: null}")
    text += "mcp:\n  servers:\n    docs: {url: 'https://docs.example.com/mcp'}\n"
    assert issues(text) == [
        "shunter.yaml:6: models.chat.mcp_tools.nope: no MCP server is named 'nope' "
        "(mcp.servers: docs)"
    ]


def test_check_config_notes_a_stdio_program_it_cannot_find(tmp_path: Path) -> None:
    path = tmp_path / "shunter.yaml"
    path.write_text(
        BASE + "mcp:\n  servers:\n"
        "    gone: {command: [no-such-program-here, --stdio]}\n"
        "    here: {command: [python3, server.py]}\n"
    )
    found = check_config(path, serving=False, network=False)
    assert found.issues == []
    assert [n for n in found.notes if "mcp." in n] == [
        f"{path}:8: mcp.servers.gone.command: 'no-such-program-here' is not found: "
        "it will not start"
    ]
