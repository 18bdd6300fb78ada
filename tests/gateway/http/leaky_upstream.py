"""An indiscreet upstream on loopback (plain asyncio, HTTP/1.1): it tells on its callers.

What it answers depends on :attr:`LeakyUpstream.mode`:

* ``"401"`` / ``"500"``: an error whose message quotes the request's ``Authorization`` and
  ``x-api-key`` headers and its own address (``127.0.0.1:<port>``, an internal URL);
* ``"midstream"``: a stream that sends one chunk, then an in-band error quoting the same;
* ``"firehose"``: a stream of 16 KiB chunks that never ends, until the caller hangs up.

Every request is recorded with its headers; :attr:`LeakyUpstream.hung_up` is set when a
caller closes a connection that still had a request running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any

from tests.fixtures.loopback import LoopbackServer

FIREHOSE_TEXT = "x" * 16384


class LeakyUpstream(LoopbackServer):
    """The server, in a thread with its own loop; use it as a context manager."""

    def __init__(self, mode: str = "401") -> None:
        super().__init__()
        self.mode = mode
        self.requests: list[dict[str, str]] = []
        self.hung_up = threading.Event()
        self.chunks_sent = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def answer(
        self,
        request_line: str,
        headers: dict[str, str],
        body: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.requests.append(headers)
        await self._answer(headers, reader, writer)

    async def _answer(
        self, headers: dict[str, str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        tattle = (
            f"Invalid credentials {headers.get('authorization')!r} / "
            f"x-api-key={headers.get('x-api-key')} sent to 127.0.0.1:{self.port}; "
            "see http://10.20.30.40:8443/internal/docs"
        )
        error = {"error": {"message": tattle, "type": "invalid_request_error", "code": None}}
        if self.mode in ("401", "500"):
            body = json.dumps(error).encode()
            status = "401 Unauthorized" if self.mode == "401" else "500 Internal Server Error"
            writer.write(
                f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        if self.mode == "midstream":
            await _frame(writer, _chunk("hello"))
            await _frame(writer, error)
            await _frame(writer, "[DONE]")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return
        gone = asyncio.ensure_future(reader.read(1))  # the caller hanging up
        try:
            while not gone.done():
                await _frame(writer, _chunk(FIREHOSE_TEXT))
                self.chunks_sent += 1
        except ConnectionError:
            pass
        finally:
            gone.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await gone
            self.hung_up.set()
            writer.transport.abort()


def _chunk(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-leaky",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "leaky",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }


async def _frame(writer: asyncio.StreamWriter, data: Any) -> None:
    text = data if isinstance(data, str) else json.dumps(data)
    frame = f"data: {text}\n\n".encode()
    writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
    await writer.drain()
