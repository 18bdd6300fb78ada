"""An OpenAI-compatible upstream on loopback whose answers are sure or unsure on demand.

``POST /v1/chat/completions`` (whole or streamed, one chunk per token) answers eight tokens
led by the server's name (``small answer one two ...``); with ``logprobs: true`` each token
carries a logprob, chosen by a marker in the last user message:

* ``[sure]`` (the default): every token at p = 0.99;
* ``[unsure]``: every token at p = 0.14;
* ``[late]``: the first four tokens sure, the last four at p = 0.05 (sure on a short look,
  unsure on the whole answer);
* ``[tool]`` / ``[tool-sure]``: a tool call ``get_weather({"city": "Paris"})`` whose raw
  text (``<tool_call>{...}</tool_call>``, as vLLM reports it) is near-certain except the
  argument value ``Paris``, unsure (p = 0.08) or sure;
* ``[down]``: a server named ``small`` answers 500; ``[cut]``: its stream ends after three
  tokens, before any ``finish_reason``.

Every request's body is kept in :attr:`JudgedUpstream.bodies`. Usage: 10 prompt tokens,
one completion token per answer token.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.fixtures.loopback import LoopbackServer

SURE, UNSURE, LOW = -0.01, -2.0, -3.0
ARGUMENT = -2.5
_CALL = [
    "<tool_call>", '{"', "name", '":', ' "', "get", "_weather", '",', ' "', "arguments",
    '":', ' {"', "city", '":', ' "', "Par", "is", '"}}', "</tool_call>",
]  # fmt: skip
_VALUE = {"Par", "is"}


class JudgedUpstream(LoopbackServer):
    """The server, in a thread with its own event loop; ``with JudgedUpstream("small")``."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.bodies: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def answer(
        self,
        request_line: str,
        headers: dict[str, str],
        raw: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        if request_line.startswith("GET"):
            await _send(writer, {"object": "list", "data": []})
            return
        body = json.loads(raw)
        self.bodies.append(body)
        if self.name == "small" and _mode(body) == "down":
            await _send(writer, {"error": {"message": "down", "type": "server_error"}}, 500)
        elif body.get("stream"):
            await self._stream(writer, body)
        else:
            await _send(writer, self._whole(body))

    def _tokens(self, body: dict[str, Any]) -> tuple[list[str], list[float], bool]:
        mode = _mode(body)
        if mode.startswith("tool"):
            value = SURE if mode == "tool-sure" else ARGUMENT
            return _CALL, [value if t in _VALUE else -0.001 for t in _CALL], True
        words = [self.name, " answer", " one", " two", " three", " four", " five", "."]
        lows = {
            "sure": [SURE] * 8,
            "unsure": [UNSURE] * 8,
            "late": [SURE] * 4 + [LOW] * 4,
        }
        return words, lows.get(mode, [SURE] * 8), False

    def _whole(self, body: dict[str, Any]) -> dict[str, Any]:
        tokens, logprobs, call = self._tokens(body)
        message: dict[str, Any] = {"role": "assistant", "content": "".join(tokens)}
        finish = "stop"
        if call:
            function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": function}],
            }
            finish = "tool_calls"
        choice = {
            "index": 0,
            "message": message,
            "logprobs": _logprobs(tokens, logprobs) if body.get("logprobs") else None,
            "finish_reason": finish,
        }
        return {**_base(body, "chat.completion"), "choices": [choice], "usage": _usage(tokens)}

    async def _stream(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        tokens, logprobs, _ = self._tokens(body)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        base = _base(body, "chat.completion.chunk")
        if self.name == "small" and _mode(body) == "cut":
            tokens, logprobs = tokens[:3], logprobs[:3]
        for index, (token, logprob) in enumerate(zip(tokens, logprobs, strict=True)):
            delta = {"role": "assistant", "content": token} if index == 0 else {"content": token}
            choice = {
                "index": 0,
                "delta": delta,
                "logprobs": _logprobs([token], [logprob]) if body.get("logprobs") else None,
                "finish_reason": None,
            }
            await _frame(writer, {**base, "choices": [choice]})
        if len(tokens) == 3:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return
        end = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
        await _frame(writer, {**base, "choices": [end]})
        if (body.get("stream_options") or {}).get("include_usage"):
            await _frame(writer, {**base, "choices": [], "usage": _usage(tokens)})
        writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
        await writer.drain()


def _mode(body: dict[str, Any]) -> str:
    text = str(body.get("messages", [{}])[-1].get("content", ""))
    for mode in ("tool-sure", "tool", "unsure", "late", "down", "cut"):
        if f"[{mode}]" in text:
            return mode
    return "sure"


def _base(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return {"id": f"id-{kind}", "object": kind, "created": 1700000000, "model": body["model"]}


def _logprobs(tokens: list[str], logprobs: list[float]) -> dict[str, Any]:
    content = [
        {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
        for t, lp in zip(tokens, logprobs, strict=True)
    ]
    return {"content": content, "refusal": None}


def _usage(tokens: list[str]) -> dict[str, int]:
    return {"prompt_tokens": 10, "completion_tokens": len(tokens), "total_tokens": 10 + len(tokens)}


async def _send(writer: asyncio.StreamWriter, payload: dict[str, Any], status: int = 200) -> None:
    data = json.dumps(payload).encode()
    writer.write(
        b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (status, len(data), data)
    )
    await writer.drain()


async def _frame(writer: asyncio.StreamWriter, payload: dict[str, Any]) -> None:
    frame = b"data: " + json.dumps(payload).encode() + b"\n\n"
    writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
    await writer.drain()
