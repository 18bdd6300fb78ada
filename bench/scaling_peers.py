"""The processes around the gateway in ``bench/scaling.py``: an upstream, a load generator
and a relay that does nothing but relay (the floor a streamed chunk costs).

All three are asyncio protocols on uvloop, written to cost little CPU per request: on a
2-core machine they share one core with the gateway's second worker, so whatever they use
is taken from the workers' scaling.

* **Upstream**: ``POST /r<bytes>/c<chunks>/...`` answers with ``bytes`` of content; with
  ``"stream": true``, ``chunks`` chunks each in its own write (a token-by-token server);
  ``/b<chunks>/`` instead of ``/c<chunks>/`` writes the whole stream at once (a static
  file, as nginx serves one).
* **Load generator**: ``count`` requests over ``connections`` keep-alive connections, each
  response read whole (chunked bodies parsed) before the next request goes.
* **Relay**: an HTTP/1.1 proxy that forwards each upstream read to its client as it
  arrives, unparsed: a read and a write per chunk, with no gateway in between.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import ClassVar, cast

import uvloop


def _answer(content_bytes: int) -> bytes:
    content = "x" * max(1, content_bytes)
    return json.dumps(
        {
            "id": "chatcmpl-up",
            "object": "chat.completion",
            "created": 1,
            "model": "up",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }
    ).encode()


def _frame(body: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _frame(
        {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "up",
         "choices": [choice]}
    )  # fmt: skip


def stream_frames(chunks: int) -> list[bytes]:
    """The SSE frames of a streamed answer of ``chunks`` content chunks, with usage."""
    usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": chunks + 10}
    frames = [_chunk({"role": "assistant", "content": ""})]
    frames += [_chunk({"content": "tok "})] * chunks
    frames.append(_chunk({}, "stop"))
    frames.append(
        _frame(
            {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1,
             "model": "up", "choices": [], "usage": usage}
        )
    )  # fmt: skip
    frames.append(b"data: [DONE]\n\n")
    return frames


def _content_length(head: bytes) -> int:
    lower = head.lower()
    at = lower.find(b"content-length:")
    if at < 0:
        return -1
    end = lower.find(b"\r\n", at)
    return int(lower[at + 15 : end if end >= 0 else len(lower)])


def _take_request(buffer: bytes) -> tuple[bytes, bytes, bytes] | None:
    """The first whole request in ``buffer``: its request line, its body, and what
    follows; ``None`` while it is incomplete."""
    head_end = buffer.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    end = head_end + 4 + max(0, _content_length(buffer[:head_end]))
    if len(buffer) < end:
        return None
    line_end = buffer.find(b"\r\n")
    return buffer[:line_end], buffer[head_end + 4 : end], buffer[end:]


# --- the upstream ------------------------------------------------------------------------


class Upstream(asyncio.Protocol):
    """See the module's docstring; whole answers are built once per size."""

    answers: ClassVar[dict[int, bytes]] = {}
    streams: ClassVar[dict[int, list[bytes]]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not a subclass
        self.buffer = b""
        self.writing: asyncio.Task[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.writing is None:
            taken = _take_request(self.buffer)
            if taken is None:
                return
            line, body, self.buffer = taken
            self.respond(line.split(b" ")[1].decode(), body)

    def respond(self, path: str, body: bytes) -> None:
        parts = path.split("/")
        size, chunks, burst = int(parts[1][1:]), int(parts[2][1:]), parts[2][0] == "b"
        if b'"stream":true' not in body.replace(b" ", b""):
            answer = self.answers.get(size) or self.answers.setdefault(size, _answer(size))
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(answer), answer)
            )
            return
        frames = self.streams.get(chunks) or self.streams.setdefault(chunks, stream_frames(chunks))
        head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        if burst:  # the whole stream in one write, as a static file is served
            whole = b"".join(frames)
            self.transport.write(b"%s%x\r\n%s\r\n0\r\n\r\n" % (head, len(whole), whole))
            return
        self.transport.write(head)
        self.writing = asyncio.ensure_future(self.trickle(frames))

    async def trickle(self, frames: list[bytes]) -> None:
        for frame in frames:
            self.transport.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await asyncio.sleep(0)  # one chunk per write, as a token-by-token server
        self.transport.write(b"0\r\n\r\n")
        self.writing = None
        self.data_received(b"")  # a request that came in meanwhile


def run_upstream(port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Upstream, "127.0.0.1", port, backlog=1024)
        await server.serve_forever()

    uvloop.run(main())


# --- the load generator ------------------------------------------------------------------


class _Client(asyncio.Protocol):
    """One keep-alive connection sending ``count`` requests, one at a time."""

    def __init__(self, request: bytes, count: int, done: asyncio.Future[None]) -> None:
        self.request = request
        self.left = count
        self.done = done

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not a subclass
        self._send()

    def _send(self) -> None:
        self.buffer = bytearray()
        self.body_at = -1  # where the body starts, once the head is in
        self.length = -1  # content-length, or -1 for a chunked body
        self.chunk_at = 0  # chunked: where the next chunk's size line starts
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self._whole():
            return
        self.left -= 1
        if self.left:
            self._send()
        else:
            self.transport.close()
            if not self.done.done():
                self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionError("the gateway closed the connection"))

    def _whole(self) -> bool:
        buffer = self.buffer
        if self.body_at < 0:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return False
            head = bytes(buffer[:head_end])
            if head[9:12] != b"200":
                raise RuntimeError(f"gateway answered {bytes(buffer[:300])!r}")
            self.body_at = self.chunk_at = head_end + 4
            self.length = _content_length(head)
        if self.length >= 0:
            return len(buffer) >= self.body_at + self.length
        while True:  # chunked: walk the size lines that have arrived
            line_end = buffer.find(b"\r\n", self.chunk_at)
            if line_end < 0:
                return False
            size = int(buffer[self.chunk_at : line_end], 16)
            if size == 0:
                return len(buffer) >= line_end + 4
            self.chunk_at = line_end + 2 + size + 2
            if self.chunk_at > len(buffer):
                return False


def load(port: int, body: bytes, count: int, connections: int) -> float:
    """Send ``count`` requests over ``connections`` keep-alive connections; seconds taken."""
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"authorization: Bearer sk-bench\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        share = [count // connections + (i < count % connections) for i in range(connections)]
        waits = []
        for n in share:
            if n:
                done: asyncio.Future[None] = loop.create_future()
                await loop.create_connection(
                    lambda n=n, done=done: _Client(request, n, done), "127.0.0.1", port
                )
                waits.append(done)
        await asyncio.gather(*waits)

    started = time.perf_counter()
    uvloop.run(main())
    return time.perf_counter() - started


# --- the relay ---------------------------------------------------------------------------


class _RelayUp(asyncio.Protocol):
    def __init__(self, client: _RelayClient) -> None:
        self.client = client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not a subclass

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)
        if data.endswith(b"0\r\n\r\n"):  # the upstream's last chunk: the answer is whole
            self.client.busy = False
            self.client.pump()


class _RelayClient(asyncio.Protocol):
    def __init__(self, upstream_port: int, path: bytes) -> None:
        self.upstream_port = upstream_port
        self.path = path
        self.up: _RelayUp | None = None
        self.buffer = b""
        self.busy = False
        self.connecting: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not a subclass
        self.connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, self.up = await loop.create_connection(
            lambda: _RelayUp(self), "127.0.0.1", self.upstream_port
        )
        self.pump()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.pump()

    def pump(self) -> None:
        taken = None if self.up is None or self.busy else _take_request(self.buffer)
        if taken is None or self.up is None:
            return
        _, body, self.buffer = taken
        self.busy = True
        self.up.transport.write(
            b"POST %s HTTP/1.1\r\nhost: upstream\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (self.path, len(body), body)
        )


def run_relay(port: int, upstream_port: int, path: str) -> None:
    """Serve the relay on ``port``, every request going to ``path`` on the upstream."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        factory = lambda: _RelayClient(upstream_port, path.encode())  # noqa: E731
        server = await loop.create_server(factory, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())
