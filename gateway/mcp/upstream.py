"""One configured MCP server as the hub uses it: a connection kept up by a supervisor task
(reconnected, or the process restarted, with back-off when it is lost), its tool list kept
for a while, and calls bounded in number (``max_concurrency``, and
``max_concurrency_per_key`` for one API key), time (``timeout_s``) and size
(``max_result_bytes``).

A slow or dead server costs only its own callers: they get a :class:`ToolServerError`
(504 for the timeout) within its ``timeout_s``; other servers' calls never wait on it, and
one key's calls leave the others room. What the server says back (its errors, its tools'
results) never carries the credentials the gateway holds for it (its headers, its OAuth
secret, its secret-looking environment): they are taken out before anyone reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import mcp_types
import orjson
import structlog
from mcp.client import Client
from mcp.client._transport import TransportStreams
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from backends.http.redact import Redactor, secret_name
from gateway.config.mcp import HttpServer, StdioServer
from gateway.mcp.hub import McpTool, ToolResult, ToolServerError, ToolServerTimeoutError
from gateway.mcp.transports import http_transport, stdio_transport

log = structlog.get_logger("shunter.mcp")
BACKOFF_BASE_S = 0.25
BACKOFF_MAX_S = 30.0
STABLE_S = 10.0
"""A connection that lived this long resets the back-off."""
MAX_LIST_PAGES = 50
_STDIO_ENDED = "its process ended before the MCP handshake"
CLIENT_INFO = mcp_types.Implementation(name="shunter", version="1")


class Upstream:
    """A supervised connection to server ``name``; :meth:`start` it, :meth:`aclose` it."""

    def __init__(self, name: str, settings: StdioServer | HttpServer, list_ttl_s: float) -> None:
        self.name = name
        self.settings = settings
        self.list_ttl_s = list_ttl_s
        self.restarts = 0
        self._slots = asyncio.Semaphore(settings.max_concurrency)
        share = settings.max_concurrency_per_key or max(1, settings.max_concurrency // 2)
        self._shares = KeyShares(share)
        self._redactor = redactor_of(settings)
        self._client: Client | None = None
        self._connected = asyncio.Event()
        self._attempted = asyncio.Event()  # a connect attempt finished (either way)
        self._lost = asyncio.Event()
        self._stop = asyncio.Event()
        self._failure: str | None = None
        self._tools: tuple[McpTool, ...] | None = None
        self._listed_at = 0.0
        self._listing = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        """Whether the server is connected now."""
        return self._client is not None

    def start(self) -> None:
        """Connect (start the process) in the background, and keep connected."""
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp-upstream:{self.name}")

    async def aclose(self) -> None:
        """Disconnect (stop the process); waits a bounded while for it."""
        self._stop.set()
        self._lost.set()
        task, self._task = self._task, None
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=10.0)
        if not done:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- what the hub asks ---------------------------------------------------------------
    async def list_tools(self) -> tuple[McpTool, ...]:
        """The server's tools (the ``tools`` filter applied), kept ``list_ttl_s``."""
        if self._tools is not None and time.monotonic() - self._listed_at < self.list_ttl_s:
            return self._tools
        async with self._bounded("tools/list") as client:
            tools = await all_tools(client)
        wanted = self.settings.tools
        listed = tuple(
            listed_tool(self.name, t) for t in tools if wanted is None or t.name in wanted
        )
        self._tools, self._listed_at = listed, time.monotonic()
        return listed

    def known_tool(self, tool: str) -> bool | None:
        """Whether the last listing had ``tool`` (``None``: not listed yet)."""
        if self._tools is None:
            return None
        return any(t.name == tool for t in self._tools)

    async def call_tool(
        self, tool: str, arguments: Mapping[str, Any], key_id: str = ""
    ) -> ToolResult:
        """Call ``tool`` for the key ``key_id``; its own error is a result (``is_error``),
        the server's a raise (a result past ``max_result_bytes`` too)."""
        async with self._bounded("tools/call", key_id) as client:
            result = await client.call_tool(tool, dict(arguments))
        content = [
            b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in result.content
        ]
        size = len(orjson.dumps([content, result.structured_content]))
        limit = int(self.settings.max_result_bytes)
        if size > limit:
            raise ToolServerError(
                f"MCP server '{self.name}' answered tools/call with {size} bytes; at most "
                f"{limit} come back."
            )
        scrub = self._redactor.secrets_only
        return ToolResult(
            content=[scrubbed(block, scrub) for block in content],
            structured=scrubbed(result.structured_content, scrub),
            is_error=bool(result.is_error),
        )

    @contextlib.asynccontextmanager
    async def _bounded(self, method: str, key_id: str = "") -> AsyncIterator[Client]:
        """A connected client within one slot (and one of the key's share) and the
        server's timeout; every failure of the server becomes a :class:`ToolServerError`,
        its words scrubbed."""
        timeout_s = self.settings.timeout_s
        try:
            async with asyncio.timeout(timeout_s), self._shares.of(key_id), self._slots:
                yield await self._ready()
        except TimeoutError as exc:
            raise _timed_out(self.name, method, timeout_s) from exc
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise _timed_out(self.name, method, timeout_s) from exc
            if exc.code == CONNECTION_CLOSED:
                self._lose()
            said = self._redactor.for_client(_clip(exc.error.message))
            raise ToolServerError(f"MCP server '{self.name}' failed {method}: {said}") from exc
        except ToolServerError:
            raise
        except Exception as exc:  # a transport's failure (refused, reset, a bad answer)
            self._lose()
            said = self._redactor.for_client(_describe(exc))
            raise ToolServerError(f"MCP server '{self.name}' failed {method}: {said}") from exc

    async def _ready(self) -> Client:
        """The connected client; a server whose last connect failed fails at once."""
        while self._client is None:
            if self._task is None or self._stop.is_set():
                raise ToolServerError(f"MCP server '{self.name}' is not running.")
            if self._failure is not None and not self._connected.is_set():
                raise ToolServerError(f"MCP server '{self.name}' {self._down()}")
            await self._attempted.wait()
        return self._client

    # -- the supervisor -------------------------------------------------------------------
    async def _supervise(self) -> None:
        delay = BACKOFF_BASE_S
        while not self._stop.is_set():
            started = time.monotonic()
            await self._connect_once()
            if self._stop.is_set():
                return
            if time.monotonic() - started > STABLE_S:
                delay = BACKOFF_BASE_S
            self.restarts += 1
            log.warning("mcp_server_down", server=self.name, retry_in_s=delay, why=self._failure)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            delay = min(delay * 2, BACKOFF_MAX_S)

    async def _connect_once(self) -> None:
        """One connection: made, served until lost (or stopped), and closed."""
        self._lost.clear()
        try:
            async with contextlib.AsyncExitStack() as stack:
                async with asyncio.timeout(self.settings.timeout_s):
                    client = await stack.enter_async_context(self._new_client())
                self._client, self._failure = client, None
                self._tools = None  # a new process may offer other tools
                self._connected.set()
                self._attempted.set()
                self._attempted.clear()
                log.info("mcp_server_connected", server=self.name, protocol=client.protocol_version)
                await self._lost.wait()
                self._failure = self._failure or "the connection was lost"
        except Exception as exc:  # whatever failed, the supervisor tries again later
            stdio = isinstance(self.settings, StdioServer)
            self._failure = _STDIO_ENDED if stdio and _closed(exc) else _describe(exc)
        finally:
            self._client = None
            self._connected.clear()
            self._attempted.set()
            self._attempted.clear()

    def _new_client(self) -> Client:
        settings = self.settings
        transport: AbstractAsyncContextManager[TransportStreams]
        if isinstance(settings, StdioServer):
            transport = stdio_transport(self.name, settings, self._exited)
        else:
            transport = http_transport(settings)
        return Client(
            transport,
            mode="auto",
            cache=None,
            client_info=CLIENT_INFO,
            message_handler=self._on_message,
        )

    async def _on_message(self, message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._tools = None

    def _down(self) -> str:
        """Why the last connect failed, as a client reads it after the server's name (the
        operator's credentials for it taken out)."""
        said = self._redactor.for_client(self._failure or "no connection yet")
        if isinstance(self.settings, StdioServer):  # each connect starts the process anew
            return f"failed to start: {said} (its stderr is in the gateway's log)"
        return f"is unreachable: {said}"

    def _exited(self) -> None:
        self._failure = "the server process exited"
        self._lose()

    def _lose(self) -> None:
        self._lost.set()


async def all_tools(client: Client, max_pages: int = MAX_LIST_PAGES) -> list[mcp_types.Tool]:
    """Every page of a server's ``tools/list``, up to ``max_pages`` of them."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(max_pages):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def listed_tool(server: str, tool: mcp_types.Tool) -> McpTool:
    """A tool of ``server`` as the SDK lists it, as the hub describes it."""
    annotations = tool.annotations
    return McpTool(
        server=server,
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        annotations=None
        if annotations is None
        else annotations.model_dump(mode="json", by_alias=True, exclude_none=True),
    )


def _timed_out(server: str, method: str, timeout_s: float) -> ToolServerTimeoutError:
    return ToolServerTimeoutError(
        f"MCP server '{server}' did not answer {method} within {timeout_s:g}s."
    )


def _describe(exc: BaseException) -> str:
    """Why a connect failed, in words a client may read (no secrets, no addresses)."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return "no answer to the handshake in time"
    if isinstance(exc, MCPError):
        return _clip(exc.error.message)
    if isinstance(exc, OSError) and exc.strerror:  # e.g. the command does not exist
        return f"{type(exc).__name__}: {_clip(exc.strerror)}"
    return type(exc).__name__


def _closed(exc: BaseException) -> bool:
    """Whether a connect failed because the other end closed the connection."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _closed(exc.exceptions[0])
    return isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class KeyShares:
    """Each API key's share of a server's call slots: at most ``share`` of its calls at
    once; the counters of a key with none go away."""

    def __init__(self, share: int) -> None:
        self.share = share
        self._held: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @contextlib.asynccontextmanager
    async def of(self, key_id: str) -> AsyncIterator[None]:
        semaphore, users = self._held.get(key_id) or (asyncio.Semaphore(self.share), 0)
        self._held[key_id] = semaphore, users + 1
        try:
            async with semaphore:
                yield
        finally:
            semaphore, users = self._held[key_id]
            if users <= 1:
                del self._held[key_id]
            else:
                self._held[key_id] = semaphore, users - 1


def redactor_of(settings: StdioServer | HttpServer) -> Redactor:
    """What must never come back from this server: the credentials configured for it."""
    if isinstance(settings, HttpServer):
        secrets = [v.get_secret_value() for v in settings.headers.values()]
        secrets += [token for v in secrets for token in v.split()[1:]]  # "Bearer <token>"
        if settings.oauth is not None:
            secrets.append(settings.oauth.client_secret.get_secret_value())
        return Redactor(secrets, [settings.url])
    secrets = [v.get_secret_value() for k, v in settings.env.items() if secret_name(k)]
    return Redactor(secrets)


def scrubbed(value: Any, scrub: Callable[[str], str]) -> Any:
    """``value`` (JSON-ready) with ``scrub`` applied to every string in it."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: scrubbed(v, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed(v, scrub) for v in value]
    return value
