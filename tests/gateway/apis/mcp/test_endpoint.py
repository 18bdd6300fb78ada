"""``/mcp`` on a real ``shunter serve --workers 2`` with a real Redis, fronting real MCP
servers (a stdio process and a streamable-HTTP server), used by the official SDK's client
under both protocol revisions, and raw JSON-RPC for the edges."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from gateway.admission.keys import KeyRing
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.fixtures.mcp_servers import HttpToolServer, http_tool_server, stdio_command
from tests.redis_server import RedisServer

UPSTREAM_SECRET = "upstream-secret-from-env"
LEGACY, MODERN = "2025-11-25", "2026-07-28"


@pytest.fixture(scope="module")
def web() -> Iterator[HttpToolServer]:
    with http_tool_server() as server:
        yield server


@pytest.fixture(scope="module")
def keys(redis_server: RedisServer) -> dict[str, str]:
    async def create() -> dict[str, str]:
        store = RedisStateStore.from_url(redis_server.url, prefix="shunter")
        try:
            ring = KeyRing(store)
            full = (await ring.create("mcp-full"))[0]
            narrow = (await ring.create("mcp-narrow", mcp=("local:echo", "web")))[0]
            return {"full": full, "narrow": narrow}
        finally:
            await store.aclose()

    return asyncio.run(create())


@pytest.fixture(scope="module")
def gateway(
    redis_server: RedisServer,
    web: HttpToolServer,
    keys: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("mcp")
    config = folder / "shunter.yaml"
    env = {
        "SHUNTER_REDIS_URL": redis_server.url,
        "SHUNTER_MASTER_KEY": "",
        "MCP_UPSTREAM_TOKEN": UPSTREAM_SECRET,
    }
    with FaultUpstream() as upstream:
        config.write_text(_config(web, upstream.url), encoding="utf-8")
        server = start_server(config, folder / "server.log", env=env, args=["--workers", "2"])
        yield server
        stop_server(server)


def _config(web: HttpToolServer, upstream: str) -> str:
    return json.dumps(
        {
            "deployments": [{"name": "a", "backend": "openai", "base_url": upstream, "model": "m"}],
            "models": {"m": {"candidates": ["a"]}},
            "mcp": {
                "servers": {
                    "local": {"command": stdio_command(), "timeout_s": 20},
                    "web": {
                        "url": web.url,
                        "headers": {"X-Upstream-Token": "${MCP_UPSTREAM_TOKEN}"},
                    },
                    "slowpoke": {"url": web.url, "timeout_s": 1, "tools": ["slow"]},
                    # the same server without a credential: reads what "web" sent it
                    "mirror": {"url": web.url, "tools": ["seen_headers"]},
                }
            },
        }
    )


@asynccontextmanager
async def sdk_client(server: Server, key: str, mode: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    async with http:
        transport = streamable_http_client(f"{server.base_url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


@pytest.mark.parametrize("mode", ["legacy", MODERN, "auto"])
async def test_the_sdk_client_lists_and_calls_tools(
    gateway: Server, keys: dict[str, str], mode: str
) -> None:
    async with sdk_client(gateway, keys["full"], mode) as client:
        assert client.protocol_version == (LEGACY if mode == "legacy" else MODERN)  # auto: discover
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"local__echo", "local__pid", "web__add", "slowpoke__slow"} <= names
        assert "slowpoke__echo" not in names
        echoed = await client.call_tool("local__echo", {"text": "through the gateway"})
        assert _text(echoed) == "through the gateway"
        added = await client.call_tool("web__add", {"a": 20, "b": 22})
        assert added.structured_content == {"result": 42}
        failed = await client.call_tool("web__broken", {})
        assert failed.is_error and "broken on purpose" in _text(failed)


async def test_the_allow_list_applies_to_listing_and_calling(
    gateway: Server, keys: dict[str, str]
) -> None:
    async with sdk_client(gateway, keys["narrow"], "legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "local__echo" in names and "web__add" in names
        assert not {"local__add", "local__pid", "slowpoke__slow"} & names
        assert _text(await client.call_tool("local__echo", {"text": "ok"})) == "ok"
        with pytest.raises(MCPError) as refused:
            await client.call_tool("local__pid", {})
        assert refused.value.error.code == -32003
        assert "may not use" in refused.value.error.message
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("nowhere__echo", {})
        assert unknown.value.error.code == -32602


async def test_the_upstream_gets_its_credential_and_never_the_gateway_key(
    gateway: Server, keys: dict[str, str]
) -> None:
    async with sdk_client(gateway, keys["full"], MODERN) as client:
        echoed = await client.call_tool("web__seen_headers", {})
        result = await client.call_tool("mirror__seen_headers", {})
    assert result.structured_content is not None
    seen: list[dict[str, str]] = result.structured_content["result"]
    assert any(h.get("x-upstream-token") == UPSTREAM_SECRET for h in seen)
    assert not any(keys["full"] in value for h in seen for value in h.values())
    # what "web" answers never carries the credential the gateway holds for it
    assert UPSTREAM_SECRET not in json.dumps(echoed.structured_content)


async def test_a_slow_server_times_out_while_another_answers(
    gateway: Server, keys: dict[str, str]
) -> None:
    async with sdk_client(gateway, keys["full"], "legacy") as client:
        slow = asyncio.create_task(client.call_tool("slowpoke__slow", {"seconds": 30}))
        quick = asyncio.create_task(client.call_tool("local__echo", {"text": "quick"}))
        done, _ = await asyncio.wait({slow, quick}, return_when=asyncio.FIRST_COMPLETED)
        assert done == {quick}
        with pytest.raises(MCPError) as timed_out:
            await slow
    message = timed_out.value.error.message
    assert "slowpoke" in message and "did not answer tools/call within 1s" in message


def test_a_session_is_valid_on_every_worker_until_deleted(
    gateway: Server, keys: dict[str, str]
) -> None:
    headers = _headers(keys["full"])
    first = _post(gateway, _request("initialize", {"protocolVersion": LEGACY}), headers)
    session = first.headers["mcp-session-id"]
    assert first.json()["result"]["protocolVersion"] == LEGACY
    with_session = {**headers, "mcp-session-id": session, "mcp-protocol-version": LEGACY}
    for _ in range(10):  # each on a new connection: the kernel spreads them over the workers
        listed = _post(gateway, _request("tools/list"), with_session)
        assert listed.status_code == 200 and listed.json()["result"]["tools"]
    other = {**with_session, "authorization": f"Bearer {keys['narrow']}"}
    assert _post(gateway, _request("tools/list"), other).status_code == 404
    ended = httpx.delete(f"{gateway.base_url}/mcp", headers=with_session, timeout=10)
    assert ended.status_code == 200
    assert _post(gateway, _request("tools/list"), with_session).status_code == 404
    no_session = {**headers, "mcp-protocol-version": LEGACY}
    assert _post(gateway, _request("tools/list"), no_session).status_code == 400


def test_protocol_edges(gateway: Server, keys: dict[str, str]) -> None:
    url = f"{gateway.base_url}/mcp"
    assert httpx.get(url, headers=_headers(keys["full"]), timeout=10).status_code == 405
    anonymous = _post(gateway, _request("tools/list"), {"accept": "application/json"})
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
    by_api_key = {"x-api-key": keys["full"], "mcp-protocol-version": MODERN}
    listed = _post(gateway, _modern("tools/list"), {**by_api_key, "mcp-method": "tools/list"})
    assert listed.status_code == 200 and listed.json()["result"]["resultType"] == "complete"
    missing_meta = _post(
        gateway, _request("tools/list"), {**by_api_key, "mcp-method": "tools/list"}
    )
    assert missing_meta.status_code == 400 and missing_meta.json()["error"]["code"] == -32602
    as_json = {**_headers(keys["full"]), "content-type": "application/json"}
    garbled = httpx.post(url, content=b"{", headers=as_json, timeout=10)
    assert garbled.status_code == 400 and garbled.json()["error"]["code"] == -32700
    page = {**_headers(keys["full"]), "origin": "https://evil.example"}
    assert _post(gateway, _request("initialize"), page).status_code == 403
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert _post(gateway, notification, _headers(keys["full"])).status_code == 202


def test_an_sse_only_client_gets_one_event(gateway: Server, keys: dict[str, str]) -> None:
    headers = {**_headers(keys["full"]), "accept": "text/event-stream"}
    answer = _post(gateway, _request("initialize", {"protocolVersion": LEGACY}), headers)
    assert answer.headers["content-type"].startswith("text/event-stream")
    event = answer.text.strip().splitlines()
    assert event[0] == "event: message"
    assert json.loads(event[1].removeprefix("data: "))["result"]["serverInfo"]["name"] == "shunter"


def _headers(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "accept": "application/json, text/event-stream"}


def _request(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}


def _modern(method: str) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return _request(method, {"_meta": meta})


def _post(server: Server, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    # a new connection each time, so that requests reach either worker
    return httpx.post(f"{server.base_url}/mcp", json=body, headers=headers, timeout=30)


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")
