"""McpHub against real MCP servers (the SDK's server side): a stdio process it starts and
supervises, and streamable-HTTP servers with a header from the environment and OAuth."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.config.mcp import McpSettings
from gateway.mcp.accounting import ToolAccounting
from gateway.mcp.hub import (
    ToolCaller,
    ToolGrant,
    ToolNotAllowedError,
    ToolNotFoundError,
    ToolServerError,
    ToolServerTimeoutError,
)
from gateway.mcp.servers import McpHub
from tests.conftest import free_port
from tests.fixtures.mcp_servers import HttpToolServer, http_tool_server, stdio_command

EVERYONE = ToolCaller(key_id="key_test")


@pytest.fixture(scope="module")
def web() -> Iterator[HttpToolServer]:
    with http_tool_server() as server:
        yield server


@pytest.fixture(scope="module")
async def hub(web: HttpToolServer) -> AsyncIterator[McpHub]:
    """One hub for the module: its servers start once (the restart test kills one)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MCP_TEST_TOKEN", "upstream-secret")
        env.setenv("MCP_TEST_CLIENT_SECRET", "s3")
        settings = McpSettings.model_validate(
            {
                "servers": {
                    "local": {"command": stdio_command(), "timeout_s": 20},
                    "web": {"url": web.url, "headers": {"X-Upstream-Token": "${MCP_TEST_TOKEN}"}},
                    "secure": {
                        "url": web.url,
                        "oauth": {
                            "token_url": web.token_url,
                            "client_id": "shunter",
                            "client_secret": "${MCP_TEST_CLIENT_SECRET}",
                        },
                    },
                    # long enough for a loaded machine to list it, short beside the 30 s
                    # its slow tool sleeps
                    "slowpoke": {"url": web.url, "timeout_s": 5, "tools": ["slow"]},
                    # two slots: one key's share is one of them
                    "narrow": {
                        "url": web.url,
                        "max_concurrency": 2,
                        "max_result_bytes": 65536,
                        "tools": ["slow", "echo", "big"],
                    },
                    "gone": {"url": f"http://127.0.0.1:{free_port()}/mcp", "timeout_s": 5},
                }
            }
        )
    hub = McpHub(settings, ToolAccounting(CollectorRegistry()))
    hub.start()
    yield hub
    await hub.aclose()


async def test_lists_every_server_and_reports_the_one_that_is_down(hub: McpHub) -> None:
    listing = await hub.list_tools(EVERYONE)
    names = {t.qualified for t in listing.tools}
    assert {"local__echo", "local__pid", "web__add", "secure__seen_headers"} <= names
    assert {t.name for t in listing.tools if t.server == "slowpoke"} == {"slow"}  # filtered
    assert [f.server for f in listing.failures] == ["gone"]
    echo = next(t for t in listing.tools if t.qualified == "local__echo")
    assert echo.input_schema["properties"]["text"]["type"] == "string"


async def test_calls_a_tool_of_each_kind_of_server(hub: McpHub) -> None:
    assert (await hub.call_tool(EVERYONE, "local", "echo", {"text": "hi"})).text() == "hi"
    result = await hub.call_tool(EVERYONE, "web", "add", {"a": 2, "b": 3})
    assert result.text() == "5"
    assert result.structured == {"result": 5}


async def test_a_tools_own_error_is_a_result(hub: McpHub) -> None:
    result = await hub.call_tool(EVERYONE, "local", "broken", {})
    assert result.is_error
    assert "broken on purpose" in result.text()


async def test_the_grant_limits_listing_and_calling(hub: McpHub) -> None:
    caller = ToolCaller(key_id="k", grant=ToolGrant.of(["local:echo", "web"]))
    listing = await hub.list_tools(caller)
    assert {t.qualified for t in listing.tools} >= {"local__echo", "web__add"}
    assert not any(t.qualified in ("local__add", "secure__add") for t in listing.tools)
    assert listing.failures == []  # "gone" is not the caller's to see
    with pytest.raises(ToolNotAllowedError):
        await hub.call_tool(caller, "local", "add", {"a": 1, "b": 1})
    with pytest.raises(ToolNotAllowedError):
        await hub.call_tool(caller, "secure", "echo", {"text": "x"})
    assert (await hub.call_tool(caller, "local", "echo", {"text": "ok"})).text() == "ok"


async def test_unknown_tools_and_servers_are_not_found(hub: McpHub) -> None:
    with pytest.raises(ToolNotFoundError):
        await hub.call_tool(EVERYONE, "local", "nope", {})
    with pytest.raises(ToolNotFoundError):
        await hub.call_tool(EVERYONE, "nowhere", "echo", {})
    with pytest.raises(ToolNotFoundError):  # the config's filter hides it
        await hub.call_tool(EVERYONE, "slowpoke", "echo", {"text": "x"})
    assert hub.split("local__echo") == ("local", "echo")
    assert hub.split("nowhere__echo") is None


async def test_a_slow_server_times_out_without_holding_up_another(hub: McpHub) -> None:
    await hub.list_tools(EVERYONE)  # both connected
    slow = asyncio.create_task(hub.call_tool(EVERYONE, "slowpoke", "slow", {"seconds": 30}))
    quick = asyncio.create_task(hub.call_tool(EVERYONE, "local", "echo", {"text": "quick"}))
    done, _ = await asyncio.wait({slow, quick}, return_when=asyncio.FIRST_COMPLETED)
    assert done == {quick}
    assert quick.result().text() == "quick"
    with pytest.raises(ToolServerTimeoutError) as raised:
        await slow
    assert raised.value.status_code == 504
    assert "slowpoke" in raised.value.message and "5s" in raised.value.message


async def test_an_unreachable_server_fails_its_call_clearly(hub: McpHub) -> None:
    with pytest.raises(ToolServerError) as raised:
        await hub.call_tool(EVERYONE, "gone", "echo", {"text": "x"})
    assert "gone" in raised.value.message
    assert raised.value.status_code == 502


async def test_a_killed_stdio_server_is_restarted(hub: McpHub) -> None:
    first = int((await hub.call_tool(EVERYONE, "local", "pid", {})).text())
    os.kill(first, signal.SIGKILL)
    second = first
    for _ in range(200):  # bounded: about 20 s
        with contextlib.suppress(ToolServerError):  # while it restarts
            second = int((await hub.call_tool(EVERYONE, "local", "pid", {})).text())
        if second != first:
            break
        await asyncio.sleep(0.1)
    assert second != first
    upstream = hub.upstream("local")
    assert upstream is not None and upstream.restarts >= 1


async def test_upstream_credentials_come_from_the_config(hub: McpHub) -> None:
    await hub.call_tool(EVERYONE, "web", "echo", {"text": "with the token"})
    # read through another server: what the server saw, scrubbed only of that one's secrets
    seen = await _seen_headers(hub, "secure")
    assert any(h.get("x-upstream-token") == "upstream-secret" for h in seen)
    assert any(h.get("authorization", "").startswith("Bearer tok-") for h in seen)


async def test_a_servers_words_never_carry_the_credentials_it_was_sent(hub: McpHub) -> None:
    """A tool whose error quotes the request's headers, and one whose result lists them:
    the token configured for that server comes back as ``[redacted]``."""
    failed = await hub.call_tool(EVERYONE, "web", "leaky", {})
    said = json.dumps(failed.content)
    assert failed.is_error and "x-upstream-token" in said
    assert "upstream-secret" not in said and "[redacted]" in said
    listed = json.dumps(await _seen_headers(hub, "web"))
    assert "upstream-secret" not in listed and "[redacted]" in listed


async def test_a_result_past_the_servers_bound_fails_the_call(hub: McpHub) -> None:
    small = await hub.call_tool(EVERYONE, "narrow", "big", {"size": 1000})
    assert not small.is_error
    with pytest.raises(ToolServerError) as caught:
        await hub.call_tool(EVERYONE, "narrow", "big", {"size": 200_000})
    assert "at most 65536" in caught.value.message


async def test_one_keys_calls_leave_another_key_a_slot(hub: McpHub) -> None:
    """Two slots, one key's share is one: while key A waits on two slow calls, key B's
    call runs at once instead of waiting behind them."""
    one = ToolCaller(key_id="key_a")
    other = ToolCaller(key_id="key_b")
    slow = [
        asyncio.create_task(hub.call_tool(one, "narrow", "slow", {"seconds": 3})) for _ in range(2)
    ]
    await asyncio.sleep(0.3)  # the first of A's calls holds a slot
    quick = await hub.call_tool(other, "narrow", "echo", {"text": "not stuck"})
    assert not quick.is_error
    pending = [task for task in slow if not task.done()]
    assert len(pending) == 2  # B finished while both of A's were still under way
    await asyncio.gather(*slow)


async def test_calls_are_accounted(hub: McpHub) -> None:
    await hub.call_tool(EVERYONE, "web", "echo", {"text": "counted"})
    with pytest.raises(ToolNotFoundError):
        await hub.call_tool(EVERYONE, "web", "missing", {})
    accounting = hub.accounting
    calls = accounting.last(2)
    assert [c["outcome"] for c in calls] == ["not_found", "ok"]
    assert calls[1]["server"] == "web" and calls[1]["bytes_out"] > 0
    assert calls[1]["key_id"] == "key_test"
    registry = accounting.registry
    ok = {"server": "web", "tool": "echo", "outcome": "ok"}
    assert (registry.get_sample_value("shunter_mcp_tool_calls_total", ok) or 0) >= 1
    missing = {"server": "web", "tool": "unknown", "outcome": "not_found"}
    assert (registry.get_sample_value("shunter_mcp_tool_calls_total", missing) or 0) >= 1
    out = {"server": "web", "tool": "echo", "direction": "out"}
    assert (registry.get_sample_value("shunter_mcp_tool_bytes_total", out) or 0) > 0


async def _seen_headers(hub: McpHub, server: str) -> list[dict[str, Any]]:
    result = await hub.call_tool(EVERYONE, server, "seen_headers", {})
    assert result.structured is not None
    seen: list[dict[str, Any]] = result.structured["result"]
    return seen
