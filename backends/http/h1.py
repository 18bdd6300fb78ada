"""A small HTTP/1.1 client for upstream APIs: pooled keep-alive connections on asyncio
protocols, responses parsed by httptools (llhttp, the parser behind Node.js).

It does what a gateway's hot path needs and nothing else: POST/GET with a byte body,
plain or TLS connections, content-length, chunked and close-delimited bodies, streamed
bodies with back-pressure, connect/read deadlines and a bounded pool. There is no
redirect following, proxying, cookie jar or HTTP/2.

Errors raised: :class:`ConnectError` (could not connect), :class:`PoolTimeout` (no
connection free in time), :class:`RemoteProtocolError` (closed early or unparseable
response), :class:`ReadTimeout` (a read waited too long), all :class:`H1Error`.
"""

from __future__ import annotations

import asyncio
import copy
import os
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

_HIGH_WATER = 256 * 1024  # buffered body bytes before the socket stops being read


class H1Error(Exception):
    """Any failure of the upstream connection."""


class ConnectError(H1Error):
    """The connection could not be opened (refused, DNS, TLS handshake, connect deadline)."""


class PoolTimeout(H1Error):
    """Every connection was busy for longer than the pool's wait limit."""


class RemoteProtocolError(H1Error):
    """The upstream closed the connection early or sent something that is not HTTP/1.1."""


class ReadTimeout(H1Error, TimeoutError):
    """No bytes arrived within the read deadline."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; carries one exchange at a time.

    It never takes part in a reference cycle, so that a connection that ends (a stream cut
    mid-way, an error, an idle one dropped) is freed at once rather than by the garbage
    collector, which the server runs rarely: the parser, which holds this connection's
    callbacks, is dropped when the connection is lost, and a failure is raised as a fresh
    exception each time (one kept here would hold, through its traceback, the frames that
    hold this connection)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._header_name = ""
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.received_any = False
        self._body: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    # asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        if self.complete:  # bytes while idle: nothing can follow a finished exchange
            self.close()
            return
        self.received_any = True
        if self._parser is None:  # lost already: nothing more is read
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(RemoteProtocolError(f"invalid HTTP response: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._parser = None  # it holds this connection's callbacks
        if self.head_done and not self.complete and not self._chunked_or_sized():
            self.complete = True  # a close-delimited body ends with the connection
            self._wake()
        elif not self.complete:
            self._fail(RemoteProtocolError("the upstream closed the connection mid-response"))

    # httptools callbacks ---------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        assert self._parser is not None  # called by the parser itself
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim response: the real one follows
            self.headers = {}
            return
        self.status = status
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.status == 0:
            return  # end of an interim response
        assert self._parser is not None  # called by the parser itself
        self.keep_alive = self._parser.should_keep_alive()  # only valid inside the callback
        self.complete = True
        self._wake()

    # exchange --------------------------------------------------------------------------

    def send(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        self._reset()
        self.transport.write(head + body if len(body) < 16384 else head)
        if len(body) >= 16384:
            self.transport.write(body)

    async def head(self, timeout: float | None) -> None:
        while not self.head_done:
            await self._wait(timeout)

    async def next_chunk(self, timeout: float | None) -> bytes | None:
        """The buffered body bytes (waiting up to ``timeout`` for some), ``None`` at the end."""
        while not self._body:
            if self.complete:
                return None
            await self._wait(timeout)
        data = self._body.popleft() if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def has_buffered(self) -> bool:
        return bool(self._body)

    def reusable(self) -> bool:
        return (
            self.complete
            and not self.closed
            and not self._body
            and self.keep_alive
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def _wait(self, timeout: float | None) -> None:
        if self._error is not None:
            raise copy.copy(self._error)
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiter = waiter
        timer = None
        if timeout is not None:
            timer = self._loop.call_later(timeout, self._time_out, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
            # a failure raised here holds this frame in its traceback, and the waiter
            # (and the timer, through its arguments) holds the failure
            del waiter, timer

    def _time_out(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            waiter.set_exception(ReadTimeout("no data from the upstream within the deadline"))

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self._error = exc  # never raised itself: each reader gets a copy
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(copy.copy(exc))

    def _chunked_or_sized(self) -> bool:
        return "content-length" in self.headers or "chunked" in self.headers.get(
            "transfer-encoding", ""
        )


class H1Response:
    """An upstream response whose head has arrived; the body is read on demand.

    Read it whole with :meth:`read` or in pieces with :meth:`iter_chunks`, then
    :meth:`aclose` (idempotent): a fully read body gives the connection back to the pool,
    anything else closes it.
    """

    def __init__(self, pool: H1Pool, conn: _Connection, read_timeout: float | None) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self._read_timeout = read_timeout
        self.status = conn.status
        self.headers: Mapping[str, str] = conn.headers

    @property
    def is_error(self) -> bool:
        return self.status >= 400

    def body_read(self) -> bool:
        """Whether the whole body has arrived and been handed out."""
        conn = self._conn
        return conn is None or (conn.complete and not conn.has_buffered())

    async def read(self) -> bytes:
        """The whole body; the connection goes back to the pool."""
        conn = self._conn
        parts: list[bytes] = []
        try:
            while conn is not None:
                chunk = await conn.next_chunk(self._read_timeout)
                if chunk is None:
                    break
                parts.append(chunk)
        finally:
            await self.aclose()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive; each wait is bounded by the read timeout."""
        try:
            while self._conn is not None:
                chunk = await self._conn.next_chunk(self._read_timeout)
                if chunk is None:
                    break
                yield chunk
        finally:
            if self._conn is not None and self._conn.complete:
                await self.aclose()

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(conn)


class H1Pool:
    """Keep-alive connections to one origin (``base_url``), at most ``max_connections``.

    ``headers`` go on every request (host, user agent, credentials), unless a request
    sets one of them itself (a client's own ``anthropic-version``). A connection that
    the upstream closed while idle is dropped before reuse; a reused one that fails
    before any response byte arrived is retried once on a fresh connection (the upstream
    closed it without reading the request).
    """

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        max_connections: int = 1024,
        keepalive_expiry: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._prefix = parts.path.rstrip("/")
        self._ssl = ssl_context if ssl_context is not None or not self._tls else _ssl_context()
        netloc = parts.netloc.rpartition("@")[2]
        fixed = {"host": netloc, **{k.lower(): v for k, v in headers.items()}}
        self._fixed_headers = fixed
        self._fixed = _head_lines(fixed)
        self._max = max_connections
        self._expiry = keepalive_expiry
        self._idle: list[tuple[_Connection, float]] = []
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float | None = None,
        head_timeout: float | None = None,
        read_timeout: float | None = None,
    ) -> H1Response:
        """Send a request and wait for the response head (status and headers)."""
        head = self._head(method, path, len(body), headers)
        for attempt in (0, 1):
            conn = await self._acquire(connect_timeout)
            try:
                conn.send(head, body)
                await conn.head(head_timeout)
            except RemoteProtocolError:
                conn.close()
                self.release(conn)
                if attempt == 0 and conn.reused and not conn.received_any:
                    continue
                raise
            except BaseException:
                conn.close()
                self.release(conn)
                raise
            return H1Response(self, conn, read_timeout)
        raise AssertionError("unreachable")

    def release(self, conn: _Connection) -> None:
        """Return ``conn`` to the pool when it can carry another exchange, else drop it."""
        loop = asyncio.get_running_loop()
        if conn.reusable() and not self._closed:
            conn.reused = True
            self._idle.append((conn, loop.time() + self._expiry))
        else:
            conn.close()
            self._open -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()
            self._open -= 1

    async def _acquire(self, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            conn = self._take_idle(loop.time())
            if conn is not None:
                return conn
            if self._open < self._max:
                self._open += 1
                try:
                    return await self._connect(timeout)
                except BaseException:
                    self._open -= 1
                    self._wake_one()  # the slot it held is free again
                    raise
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                raise PoolTimeout(f"all {self._max} connections busy") from None

    def _take_idle(self, now: float) -> _Connection | None:
        while self._idle:
            conn, expires = self._idle.pop()
            if not conn.closed and expires > now and not _closing(conn):
                return conn
            conn.close()
            self._open -= 1
        return None

    async def _connect(self, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop),
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._tls else None,
                )
        except TimeoutError:
            raise ConnectError(f"connect to {self._host}:{self._port} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectError(f"cannot connect to {self._host}:{self._port}: {exc}") from exc
        return conn

    def _path(self, path: str) -> str:
        if path.startswith("/"):
            return self._prefix + path
        return f"{self._prefix}/{path}"

    def _head(
        self, method: str, path: str, length: int, headers: Mapping[str, str] | None
    ) -> bytes:
        extra, fixed = "", self._fixed
        if headers:
            extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            if extra.count("\n") != len(headers) or extra.count("\r") != len(headers):
                # per-request values (a client's trace context) must never add a header
                raise ValueError("HTTP header names and values must not contain line breaks")
            own = {k.lower() for k in headers}
            if not own.isdisjoint(self._fixed_headers):  # the request's value, once
                kept = {k: v for k, v in self._fixed_headers.items() if k not in own}
                fixed = _head_lines(kept)
        return (
            f"{method} {self._path(path)} HTTP/1.1\r\n".encode("latin-1")
            + fixed
            + f"{extra}content-length: {length}\r\n\r\n".encode("latin-1")
        )


def _head_lines(headers: Mapping[str, str]) -> bytes:
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")


def _closing(conn: _Connection) -> bool:
    return conn.transport is None or conn.transport.is_closing()


def _ssl_context() -> ssl.SSLContext:
    """System trust store, or certifi's bundle where the system has none configured."""
    if os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context()
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())
