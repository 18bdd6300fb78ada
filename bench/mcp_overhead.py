"""What ``/mcp`` adds to a tool call: the same ``tools/call`` to a local streamable-HTTP MCP
server (the SDK's server side, the test fixture) straight, and through a real ``shunter
serve`` fronting it, alternating call by call so that drift on a shared machine hits both.

Requests are stateless (protocol 2026-07-28) JSON-RPC over one kept-alive connection per
target. Prints p50/p95 latency of each, the added latency, and the gateway process's CPU
seconds per call (``/proc/<pid>/stat``, over the whole run).

    .venv/bin/python -m bench.mcp_overhead [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.fixtures.mcp_servers import http_tool_server

VERSION = "2026-07-28"


def _request(tool: str) -> tuple[dict[str, Any], dict[str, str]]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {"a": 20, "b": 22}, "_meta": meta},
    }
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": VERSION,
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }
    return body, headers


def _timed(client: httpx.Client, url: str, tool: str) -> float:
    body, headers = _request(tool)
    started = time.perf_counter()
    answer = client.post(url, json=body, headers=headers)
    elapsed = time.perf_counter() - started
    answer.raise_for_status()
    if "error" in answer.json():
        raise RuntimeError(f"{url}: {answer.text[:300]}")
    return elapsed * 1000


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FaultUpstream() as up, http_tool_server() as mcp:
        config = Path(tmp, "shunter.yaml")
        config.write_text(
            json.dumps(
                {
                    "deployments": [
                        {"name": "up", "backend": "openai", "base_url": up.url, "model": "m"}
                    ],
                    "models": {"m": {"candidates": ["up"]}},
                    "mcp": {"servers": {"web": {"url": mcp.url}}},
                }
            )
        )
        gateway = start_server(config, Path(tmp, "server.log"))
        try:
            _run(args.calls, mcp.url, f"{gateway.base_url}/mcp", gateway.process.pid)
        finally:
            stop_server(gateway)


def _run(calls: int, direct_url: str, gateway_url: str, pid: int) -> None:
    direct: list[float] = []
    through: list[float] = []
    with httpx.Client(timeout=30) as to_server, httpx.Client(timeout=30) as to_gateway:
        for _ in range(20):  # warm up: connections, the gateway's upstream session, caches
            _timed(to_server, direct_url, "add")
            _timed(to_gateway, gateway_url, "web__add")
        started = _cpu_s(pid)  # its idle work while the direct calls run counts too: small
        for _ in range(calls):
            direct.append(_timed(to_server, direct_url, "add"))
            through.append(_timed(to_gateway, gateway_url, "web__add"))
        cpu = _cpu_s(pid) - started
    print(f"{calls} tools/call each, alternating (ms)")
    print(f"{'':14}{'p50':>9}{'p95':>9}")
    for name, values in (("direct", direct), ("through /mcp", through)):
        print(f"{name:14}{statistics.median(values):9.2f}{_percentile(values, 95):9.2f}")
    base, routed = statistics.median(direct), statistics.median(through)
    print(f"added p50: {routed - base:.2f} ms; ratio {routed / base:.2f}x")
    print(f"gateway CPU per call: {cpu / calls * 1000:.2f} ms")


if __name__ == "__main__":
    main()
