"""A priced API on loopback for ``bench/agent_replay.py``: an OpenAI-compatible chat
server with a managed API's latency (the target traffic spills to).

``POST /v1/chat/completions`` answers ``max_tokens`` words (streamed as one chunk a word,
with a usage chunk, when ``stream`` is true); ``GET /v1/models`` lists its one model;
``GET /stats`` counts the chat requests and tokens it served. Its time to first token is
drawn per request, log-normal around ``ttft_ms`` plus ``ms_per_prompt_token`` per prompt
token, from a seed and the request's messages: the same request waits the same time
whatever policy sent it (so every policy meets the same API). Tokens then come at
``tokens_per_s``. Prompt tokens are counted as :func:`bench.agent_workload.count_tokens`
counts them (what the bench bills).

Run alone: ``python -m bench.agent_api --port 8099`` (plain asyncio, HTTP/1.1, keep-alive).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.agent_workload import count_tokens

MODEL = "agent-api"
MAX_BODY = 16 * 1024 * 1024  # a request larger than this is refused (the bench sends less)
MAX_OUTPUT = 4096


@dataclass(frozen=True)
class ApiProfile:
    """Latency and price of the fallback API."""

    ttft_ms: float = 450.0
    ttft_sigma: float = 0.25
    ms_per_prompt_token: float = 0.02
    tokens_per_s: float = 80.0
    input_per_1m: float = 0.15
    output_per_1m: float = 0.60
    seed: int = 7

    def ttft_s(self, messages: list[dict[str, Any]]) -> float:
        """This request's time to first token (the same for the same messages)."""
        digest = hashlib.blake2b(json.dumps(messages).encode(), digest_size=8).hexdigest()
        rng = random.Random(f"{self.seed}-{digest}")
        base = rng.lognormvariate(math.log(self.ttft_ms), self.ttft_sigma)
        return (base + self.ms_per_prompt_token * count_tokens(messages)) / 1000.0

    def usd(self, prompt_tokens: int, output_tokens: int) -> float:
        """List price of one request."""
        return (prompt_tokens * self.input_per_1m + output_tokens * self.output_per_1m) / 1e6


@dataclass
class Served:
    """What the API served (health probes included: they are requests too)."""

    requests: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    by_status: dict[str, int] = field(default_factory=dict)


def _frame(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-api", "object": "chat.completion.chunk", "created": int(time.time()),
        "model": MODEL, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }  # fmt: skip


def _usage(prompt: int, output: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}


class ApiServer:
    """The server's state and its request handling (see the module's docstring)."""

    def __init__(self, profile: ApiProfile) -> None:
        self.profile = profile
        self.served = Served()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection: requests in turn until the client closes it."""
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = dict(
            (k.strip().lower(), v.strip()) for k, _, v in (x.partition(":") for x in lines[1:] if x)
        )
        length = int(headers.get("content-length", "0"))
        if length > MAX_BODY:
            await self._json(writer, 413, {"error": {"message": "request too large"}})
            return False
        body = await reader.readexactly(length) if length else b""
        if method == "GET" and path.endswith("/models"):
            await self._json(writer, 200, {"object": "list", "data": [{"id": MODEL}]})
        elif method == "GET" and path == "/stats":
            await self._json(writer, 200, asdict(self.served))
        elif method == "POST" and path.endswith("/chat/completions"):
            await self._chat(writer, json.loads(body))
        else:
            await self._json(writer, 404, {"error": {"message": f"no route {path}"}})
        return headers.get("connection", "").lower() != "close"

    async def _json(self, writer: asyncio.StreamWriter, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        writer.write(
            b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, len(data), data)
        )
        key = str(status)
        self.served.by_status[key] = self.served.by_status.get(key, 0) + 1
        await writer.drain()

    async def _chat(self, writer: asyncio.StreamWriter, request: dict[str, Any]) -> None:
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            error = {"message": "messages: a non-empty list is required", "param": "messages"}
            await self._json(writer, 400, {"error": {**error, "type": "invalid_request_error"}})
            return
        wanted = request.get("max_completion_tokens") or request.get("max_tokens") or 16
        output = max(1, min(int(wanted), MAX_OUTPUT))
        prompt = count_tokens(messages)
        self.served.requests += 1
        self.served.prompt_tokens += prompt
        self.served.output_tokens += output
        await asyncio.sleep(self.profile.ttft_s(messages))
        if request.get("stream"):
            await self._stream(writer, prompt, output)
            return
        answer = {
            "id": "chatcmpl-api", "object": "chat.completion", "created": int(time.time()),
            "model": MODEL, "usage": _usage(prompt, output),
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": "word " * output}}],
        }  # fmt: skip
        await asyncio.sleep((output - 1) / self.profile.tokens_per_s)
        await self._json(writer, 200, answer)

    async def _stream(self, writer: asyncio.StreamWriter, prompt: int, output: int) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        gap = 1.0 / self.profile.tokens_per_s
        frames = [_frame(_chunk({"role": "assistant", "content": ""}))]
        for i in range(output):
            frames.append(_frame(_chunk({"content": "word "})))
            if i < output - 1:  # one word a chunk, at the token rate
                await self._send(writer, frames)
                frames = []
                await asyncio.sleep(gap)
        frames.append(_frame(_chunk({}, "length")))
        frames.append(_frame({**_chunk({}), "choices": [], "usage": _usage(prompt, output)}))
        frames.append(b"data: [DONE]\n\n")
        await self._send(writer, frames)
        writer.write(b"0\r\n\r\n")
        self.served.by_status["200"] = self.served.by_status.get("200", 0) + 1
        await writer.drain()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, frames: list[bytes]) -> None:
        data = b"".join(frames)
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await writer.drain()


async def serve(port: int, profile: ApiProfile, ready: asyncio.Event | None = None) -> None:
    """Listen on ``127.0.0.1:port`` until cancelled."""
    api = ApiServer(profile)
    server = await asyncio.start_server(api.handle, "127.0.0.1", port)
    if ready is not None:
        ready.set()
    async with server:
        await server.serve_forever()


def main() -> None:
    """Command line: ``--port`` and the profile's fields."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    defaults = ApiProfile()
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = vars(parser.parse_args())
    port = args.pop("port")
    asyncio.run(serve(port, ApiProfile(**args)))


if __name__ == "__main__":
    main()
