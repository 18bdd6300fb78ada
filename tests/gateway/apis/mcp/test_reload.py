"""One ``shunter serve`` (open mode) fronting real MCP servers: calls show on the status
page and in ``/metrics``, and an edited ``mcp:`` section takes effect without a restart."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.fixtures.mcp_servers import HttpToolServer, http_tool_server, stdio_command

MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def web() -> Iterator[HttpToolServer]:
    with http_tool_server() as server:
        yield server


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as fake:
        yield fake


def write_config(path: Path, upstream: FaultUpstream, servers: dict[str, Any]) -> None:
    config = {
        "deployments": [{"name": "a", "backend": "openai", "base_url": upstream.url, "model": "m"}],
        "models": {"m": {"candidates": ["a"]}},
        "mcp": {"servers": servers},
    }
    path.write_text(json.dumps(config), encoding="utf-8")


@pytest.fixture
def gateway(upstream: FaultUpstream, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    config = tmp_path / "shunter.yaml"
    write_config(config, upstream, {"local": {"command": stdio_command()}})
    server = start_server(config, tmp_path / "server.log")
    yield server, config
    stop_server(server)


def rpc(server: Server, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {"mcp-protocol-version": MODERN, "mcp-method": method}
    if params and "name" in params:
        headers["mcp-name"] = params["name"]
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": method,
        "params": {**(params or {}), "_meta": meta},
    }
    answer = httpx.post(f"{server.base_url}/mcp", json=body, headers=headers, timeout=30)
    reply: dict[str, Any] = answer.json()
    return reply


def tool_names(server: Server) -> set[str]:
    return {t["name"] for t in rpc(server, "tools/list")["result"]["tools"]}


def test_calls_show_on_the_status_page_in_metrics_and_the_log(gateway: tuple[Server, Path]) -> None:
    server, _ = gateway
    called = rpc(server, "tools/call", {"name": "local__echo", "arguments": {"text": "seen"}})
    assert called["result"]["content"] == [{"type": "text", "text": "seen"}]
    status = httpx.get(f"{server.base_url}/ui/status.json", timeout=10).json()
    call = status["tool_calls"][0]
    assert (call["server"], call["tool"], call["outcome"]) == ("local", "echo", "ok")
    assert status["mcp_servers"] == [
        {"name": "local", "kind": "stdio", "connected": True, "restarts": 0}
    ]
    page = httpx.get(f"{server.base_url}/ui", timeout=10).text
    assert 'id="tool-calls"' in page
    log = server.log()
    assert "mcp_server_stderr" in log and "echoing seen" in log  # the server's stderr
    metrics = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    assert 'shunter_mcp_tool_calls_total{outcome="ok",server="local",tool="echo"} 1.0' in metrics


def test_an_edited_mcp_section_is_applied_without_a_restart(
    gateway: tuple[Server, Path], web: HttpToolServer, upstream: FaultUpstream
) -> None:
    server, config = gateway
    assert "local__echo" in tool_names(server)
    write_config(config, upstream, {"web": {"url": web.url}})
    names: set[str] = set()
    for _ in range(100):  # bounded: the file is polled every second
        names = tool_names(server)
        if "web__echo" in names:
            break
        time.sleep(0.1)
    assert "web__echo" in names and "local__echo" not in names
    called = rpc(server, "tools/call", {"name": "web__add", "arguments": {"a": 1, "b": 2}})
    assert called["result"]["structuredContent"] == {"result": 3}
