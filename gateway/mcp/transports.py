"""How the gateway reaches one configured MCP server, as the SDK's client transports: a
process it starts and talks to over stdin/stdout (its stderr going to the gateway's log,
and its end noticed at once), or a remote server over streamable HTTP with the configured
headers and OAuth token.

Nothing of the client that asked the gateway travels upstream: the HTTP client here is the
gateway's own, with only the headers the config names.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable

import httpx2
import structlog
from mcp.client._transport import TransportStreams
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from gateway.config.mcp import HttpServer, StdioServer
from gateway.mcp.oauth import ClientCredentials

log = structlog.get_logger("shunter.mcp")
MAX_STDERR_LINE = 2000
"""A server's stderr line is logged up to this many characters (the rest is cut)."""
SSE_READ_TIMEOUT_S = 300.0


@contextlib.asynccontextmanager
async def stdio_transport(
    name: str, settings: StdioServer, on_exit: Callable[[], None]
) -> AsyncIterator[TransportStreams]:
    """Start the server's process; ``on_exit`` is called when it ends (its stderr closes)."""
    read_fd, write_fd = os.pipe()
    errlog = os.fdopen(write_fd, "w")
    reader: asyncio.Task[None] | None = None
    params = StdioServerParameters(
        command=settings.command[0],
        args=settings.command[1:],
        env={k: v.get_secret_value() for k, v in settings.env.items()},
        cwd=settings.cwd,
    )
    try:
        async with stdio_client(params, errlog=errlog) as streams:
            errlog.close()  # the child has its own copy: the pipe's end is the child's end
            reader = asyncio.create_task(_log_stderr(name, read_fd, on_exit))
            read_fd = -1
            yield streams
    finally:
        errlog.close()
        if read_fd >= 0:
            os.close(read_fd)
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


async def _log_stderr(name: str, fd: int, on_exit: Callable[[], None]) -> None:
    """Each stderr line of server ``name`` as a log line; ``on_exit`` at its end."""
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=MAX_STDERR_LINE * 4)
    pipe = os.fdopen(fd, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), pipe)
    pending = b""
    try:
        while chunk := await stream.read(4096):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                _log_line(name, line)
            if len(pending) > MAX_STDERR_LINE:  # no newline in sight: log what came
                _log_line(name, pending)
                pending = b""
        if pending:
            _log_line(name, pending)
        on_exit()
    finally:
        transport.close()


def _log_line(name: str, line: bytes) -> None:
    text = line[:MAX_STDERR_LINE].decode("utf-8", "replace").rstrip()
    if text:
        log.info("mcp_server_stderr", server=name, line=text)


@contextlib.asynccontextmanager
async def http_transport(settings: HttpServer) -> AsyncIterator[TransportStreams]:
    """The server's endpoint over streamable HTTP, with the configured credentials."""
    auth = ClientCredentials(settings.oauth, settings.timeout_s) if settings.oauth else None
    client = httpx2.AsyncClient(
        headers={k: v.get_secret_value() for k, v in settings.headers.items()},
        auth=auth,
        timeout=httpx2.Timeout(
            settings.timeout_s, read=max(settings.timeout_s, SSE_READ_TIMEOUT_S)
        ),
    )
    async with client, streamable_http_client(settings.url, http_client=client) as streams:
        yield streams
