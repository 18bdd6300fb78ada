"""``POST /v1/chat/completions``: the backends' own contract, so the request goes to them
as it came and their chunks are written as they are (a backend that holds its upstream's
frames hands them over untouched)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from litestar import asgi
from litestar.types import Receive, Scope, Send

from backends.base import Backend
from gateway.admission.admit import RequestFacts
from gateway.admission.cache import chat_chunks
from gateway.dispatch import ServedStream
from gateway.errors import GatewayError
from gateway.http.abilities import raw_chat
from gateway.http.endpoint import Endpoint, Served, answered_by
from gateway.http.intake import parse_body
from gateway.http.serving import handle
from gateway.protocol import ChatCompletion, ChatCompletionRequest, jsonio
from gateway.protocol.frames import Framed, FrameStream
from gateway.protocol.sse import DONE, error_frame, frame


class ChatEndpoint(Endpoint[ChatCompletionRequest, ChatCompletion]):
    operation = "chat"
    framed = True
    cached = ChatCompletion

    def parse(self, raw: bytes) -> ChatCompletionRequest:
        return parse_body(ChatCompletionRequest, raw)

    def request(self, body: ChatCompletionRequest) -> ChatCompletionRequest:
        return body

    def facts(self, body: ChatCompletionRequest) -> RequestFacts:
        return RequestFacts.of_chat(body)

    async def whole(
        self, backend: Backend, body: ChatCompletionRequest, model: str
    ) -> ChatCompletion:
        return await backend.chat(answered_by(body, model))

    def stream(self, backend: Backend, body: ChatCompletionRequest, model: str) -> FrameStream:
        body = answered_by(body, model)
        raw = raw_chat(backend)
        if raw is not None:
            return raw.chat_stream_raw(body)
        return Framed(backend.chat_stream(body))

    async def render(self, body: ChatCompletionRequest, answer: ChatCompletion) -> bytes:
        return jsonio.to_json(answer)

    def replay(self, body: ChatCompletionRequest, hit: ChatCompletion) -> AsyncIterator[bytes]:
        return replay_chunks(chat_chunks(hit), body.include_usage())

    def end(
        self, body: ChatCompletionRequest, stream: ServedStream, failure: GatewayError | None
    ) -> bytes:
        return openai_end(body, stream, failure)


CHAT = ChatEndpoint()


@asgi("/v1/chat/completions", copy_scope=False)
async def chat_completions(scope: Scope, receive: Receive, send: Send) -> None:
    await handle(scope, receive, send, CHAT)


def openai_end(body: Served, stream: ServedStream, failure: GatewayError | None) -> bytes:
    """Chat and completions: an error frame after a failure; the usage frame only for
    clients that asked for it; ``[DONE]`` in every case."""
    if failure is not None:
        return error_frame(failure) + DONE
    usage_frame = stream.usage_frame
    if usage_frame is not None and body.include_usage():
        return usage_frame + DONE
    return DONE


async def replay_chunks(chunks: list[Any], include_usage: bool) -> AsyncIterator[bytes]:
    """Cached chunks as frames (the usage chunk only for clients that asked for it)."""
    for chunk in chunks:
        if chunk.choices or include_usage:
            yield frame(chunk)
    yield DONE
