"""The HTTP/1.1 upstream client against real servers on loopback, scripted per test."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from backends.http import h1

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


class Server:
    """An asyncio server whose every request is answered by ``handler`` (False: close)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=ssl_context)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/v1"

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self.writers:
            writer.transport.abort()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                self.requests.append(head + await reader.readexactly(length))
                if not await self.handler(reader, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def closed_soon(writer: asyncio.StreamWriter, within_s: float = 2.0) -> bool:
    """Whether the server side of a connection closes (the client hung up) in time."""
    for _ in range(int(within_s / 0.01)):
        if writer.transport.is_closing():
            return True
        await asyncio.sleep(0.01)
    return False


def respond(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + b"".join(extra)
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[Server]]]:
    servers: list[Server] = []

    async def start(handler: Handler) -> Server:
        server = await Server(handler).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


async def answer_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(respond(b'{"ok":true}'))
    await writer.drain()
    return True


async def test_requests_reuse_one_keep_alive_connection(serve: Callable[..., Awaitable[Server]]):
    server = await serve(answer_ok)
    pool = h1.H1Pool(server.url(), {"authorization": "Bearer k"})
    for _ in range(5):
        response = await pool.request("POST", "chat/completions", b'{"a":1}')
        assert (response.status, await response.read()) == (200, b'{"ok":true}')
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"authorization: Bearer k\r\n" in first and first.endswith(b'\r\n\r\n{"a":1}')
    assert f"host: 127.0.0.1:{server.port}".encode() in first
    await pool.aclose()


async def test_chunked_body_arrives_piece_by_piece(serve: Callable[..., Awaitable[Server]]):
    more = asyncio.Event()

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await more.wait()  # the client must see "hello" before the rest exists
        writer.write(b"6\r\n world\r\n0\r\n\r\n")
        await writer.drain()
        return True

    server = await serve(chunked)
    pool = h1.H1Pool(server.url(), {})
    response = await pool.request("POST", "x", b"{}", read_timeout=5)
    chunks = response.iter_chunks()
    assert await anext(chunks) == b"hello"
    more.set()
    assert [c async for c in chunks] == [b" world"]
    again = await pool.request("POST", "x", b"{}", read_timeout=5)
    assert await again.read() == b"hello world"
    assert server.connections == 1
    await pool.aclose()


async def test_close_delimited_body_ends_with_the_connection(
    serve: Callable[..., Awaitable[Server]],
):
    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        await writer.drain()
        return False

    server = await serve(until_close)
    pool = h1.H1Pool(server.url(), {})
    for _ in range(2):
        response = await pool.request("GET", "models")
        assert await response.read() == b"all of it"
    assert server.connections == 2
    await pool.aclose()


async def test_idle_connection_closed_by_the_server_is_replaced(
    serve: Callable[..., Awaitable[Server]],
):
    async def answer_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(respond(b"{}"))
        await writer.drain()
        return False  # keep-alive advertised, but the server closes while the client idles

    server = await serve(answer_then_close)
    pool = h1.H1Pool(server.url(), {})
    assert await (await pool.request("POST", "x", b"{}")).read() == b"{}"
    await asyncio.sleep(0.05)
    assert await (await pool.request("POST", "x", b"{}")).read() == b"{}"
    assert server.connections == 2
    await pool.aclose()


async def test_reused_connection_dropped_unanswered_is_retried_once(
    serve: Callable[..., Awaitable[Server]],
):
    answers = iter([True, False, True])

    async def sometimes_drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if next(answers):
            writer.write(respond(b"{}"))
            await writer.drain()
            return True
        return False  # read the request, then close without a byte

    server = await serve(sometimes_drop)
    pool = h1.H1Pool(server.url(), {})
    assert await (await pool.request("POST", "x", b"{}")).read() == b"{}"
    assert await (await pool.request("POST", "x", b"{}")).read() == b"{}"
    assert (server.connections, len(server.requests)) == (2, 3)
    await pool.aclose()


async def test_fresh_connection_dropped_unanswered_is_an_error(
    serve: Callable[..., Awaitable[Server]],
):
    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        return False

    server = await serve(drop)
    pool = h1.H1Pool(server.url(), {})
    with pytest.raises(h1.RemoteProtocolError, match="closed the connection"):
        await pool.request("POST", "x", b"{}")
    assert len(server.requests) == 1  # not retried: nothing says the server ignored it
    await pool.aclose()


async def test_stalled_body_times_out_and_the_connection_is_dropped(
    serve: Callable[..., Awaitable[Server]],
):
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()
        await reader.read()  # until the client goes away
        return False

    server = await serve(stall)
    pool = h1.H1Pool(server.url(), {})
    response = await pool.request("POST", "x", b"{}", read_timeout=0.2)
    chunks = response.iter_chunks()
    assert await anext(chunks) == b"partial"
    with pytest.raises(h1.ReadTimeout):
        await anext(chunks)
    await response.aclose()
    assert await closed_soon(server.writers[0])
    await pool.aclose()


async def test_head_timeout(serve: Callable[..., Awaitable[Server]]):
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await reader.read()
        return False

    server = await serve(silent)
    pool = h1.H1Pool(server.url(), {})
    with pytest.raises(h1.ReadTimeout):
        await pool.request("POST", "x", b"{}", head_timeout=0.2)
    await pool.aclose()


async def test_pool_limit_waits_then_times_out(serve: Callable[..., Awaitable[Server]]):
    server = await serve(answer_ok)
    pool = h1.H1Pool(server.url(), {}, max_connections=1)
    held = await pool.request("POST", "x", b"{}")
    with pytest.raises(h1.PoolTimeout):
        await pool.request("POST", "x", b"{}", connect_timeout=0.2)
    waiting = asyncio.create_task(pool.request("POST", "x", b"{}", connect_timeout=5))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await held.read()  # gives the connection back: the waiter gets it
    assert await (await waiting).read() == b'{"ok":true}'
    assert server.connections == 1
    await pool.aclose()


async def test_connect_refused_is_a_connect_error():
    pool = h1.H1Pool("http://127.0.0.1:1/v1", {})
    with pytest.raises(h1.ConnectError, match="cannot connect"):
        await pool.request("POST", "x", b"{}", connect_timeout=2)


async def test_garbage_is_a_protocol_error(serve: Callable[..., Awaitable[Server]]):
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SMTP ready\r\n\r\n")
        await writer.drain()
        return False

    server = await serve(garbage)
    pool = h1.H1Pool(server.url(), {})
    with pytest.raises(h1.RemoteProtocolError, match="invalid HTTP response"):
        await pool.request("POST", "x", b"{}")
    await pool.aclose()


async def test_a_slow_reader_stops_the_socket_being_read(serve: Callable[..., Awaitable[Server]]):
    size = 64 * 1024 * 1024
    buffered: list[int] = []

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        writer.write(bytes(size))
        await asyncio.sleep(0.5)  # the client reads nothing meanwhile
        buffered.append(writer.transport.get_write_buffer_size())
        await writer.drain()
        return True

    server = await serve(flood)
    pool = h1.H1Pool(server.url(), {})
    response = await pool.request("GET", "big", read_timeout=10)
    await asyncio.sleep(0.7)
    assert buffered and buffered[0] > size // 2  # the client did not slurp it into memory
    total = 0
    async for chunk in response.iter_chunks():
        total += len(chunk)
    assert total == size
    await pool.aclose()


async def test_closing_a_stream_early_closes_its_connection(
    serve: Callable[..., Awaitable[Server]],
):
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        while True:
            writer.write(b"4\r\ndata\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)

    server = await serve(endless)
    pool = h1.H1Pool(server.url(), {})
    response = await pool.request("POST", "x", b"{}")
    assert await anext(response.iter_chunks())
    await response.aclose()
    assert await closed_soon(server.writers[0])
    await pool.aclose()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_https(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    server = await Server(answer_ok).start(server_side)
    trusted = ssl.create_default_context(cafile=str(cert))
    pool = h1.H1Pool(server.url("https"), {}, ssl_context=trusted)
    response = await pool.request("POST", "chat/completions", b"{}")
    assert await response.read() == b'{"ok":true}'
    await pool.aclose()
    untrusted = h1.H1Pool(server.url("https"), {})  # system/certifi roots: self-signed fails
    with pytest.raises(h1.ConnectError):
        await untrusted.request("POST", "chat/completions", b"{}", connect_timeout=5)
    await server.close()


async def test_a_failed_connect_frees_its_slot_for_a_waiter() -> None:
    pool = h1.H1Pool("http://127.0.0.1:1/v1", {}, max_connections=1)
    first = asyncio.ensure_future(pool.request("POST", "x", b"{}", connect_timeout=5))
    second = asyncio.ensure_future(pool.request("POST", "x", b"{}", connect_timeout=5))
    results = await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 2)
    # the waiter was woken when the slot came free: it tried (and failed) to connect itself
    assert [type(r) for r in results] == [h1.ConnectError, h1.ConnectError]
