"""An OpenAI-compatible upstream on loopback that answers every known question right.

The "large model" of the cascade benchmark: it looks the last user message up in an answer
key and replies with the first accepted answer (whole or streamed), with usage counted as
a managed API would (about four characters a token for the prompt, the answer's words plus
one). An optional delay stands for a managed API's own latency. By default it returns no
logprobs (a managed API configured without them: it can only be a cascade's last step);
with ``logprob=`` every answer word asked for them carries that log-probability, a small
step as sure or as unsure as wanted, at no cost of its own (to measure the gateway).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Mapping
from typing import Any


class AnswerKey:
    """``with AnswerKey({"What is 2 + 2?": "4"}) as key: key.url``."""

    def __init__(
        self, answers: Mapping[str, str], delay_s: float = 0.0, logprob: float | None = None
    ) -> None:
        self.answers = dict(answers)
        self.delay_s = delay_s
        self.logprob = logprob
        self.port = 0
        self.requests = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> AnswerKey:
        ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve(ready)), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("answer key did not start")
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _serve(self, ready: threading.Event) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await self._stop.wait()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                length = 0
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                raw = await reader.readexactly(length)
                if head[0].startswith("GET"):
                    await _send(writer, {"object": "list", "data": []})
                    continue
                self.requests += 1
                body = json.loads(raw)
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                await self._answer(writer, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        messages = body.get("messages") or [{}]
        question = str(messages[-1].get("content", "")).strip()
        text = self.answers.get(question, "I do not know.")
        prompt = sum(len(str(m.get("content", ""))) for m in messages) // 4 + 3 * len(messages)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": len(text.split()) + 1,
            "total_tokens": prompt + len(text.split()) + 1,
        }
        base = {"id": f"key-{time.monotonic_ns()}", "created": int(time.time()), "model": "key"}
        logprobs = None
        if body.get("logprobs") and self.logprob is not None:
            words = text.split(" ")
            pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
            logprobs = {
                "content": [
                    {
                        "token": p,
                        "logprob": self.logprob,
                        "bytes": list(p.encode()),
                        "top_logprobs": [],
                    }
                    for p in pieces
                ],
                "refusal": None,
            }
        if not body.get("stream"):
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": logprobs,
                "finish_reason": "stop",
            }
            await _send(
                writer, {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        chunk = {**base, "object": "chat.completion.chunk"}
        frames: list[dict[str, Any]] = [
            {
                **chunk,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": text},
                        "finish_reason": None,
                    }
                ],
            },
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            frames.append({**chunk, "choices": [], "usage": usage})
        for frame in frames:
            data = b"data: " + json.dumps(frame).encode() + b"\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
        await writer.drain()


async def _send(writer: asyncio.StreamWriter, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (len(data), data)
    )
    await writer.drain()
