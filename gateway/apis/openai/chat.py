"""``POST /v1/chat/completions``: the backends' own contract, so the request goes to every
deployment as it came (``model`` set to what the deployment's answers name) and their
frames are written as they are (a backend that holds its upstream's frames hands them over
untouched)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from backends.base import Capabilities
from gateway.admission.cache import chat_chunks
from gateway.apis.contract import Decoded, Exchange, Outcome, Reply, parse_body
from gateway.dispatch import Sending, ServedStream
from gateway.errors import GatewayError
from gateway.protocol import ChatCompletion, ChatCompletionRequest, CompletionRequest, jsonio
from gateway.protocol.sse import DONE, error_frame, frame


class AsSent:
    """The plan of a request every deployment takes as it is: only ``model`` changes, to
    the model the deployment's answers name (as OpenAI names the model it resolved)."""

    __slots__ = ("request",)

    def __init__(self, request: Any) -> None:
        self.request = request

    def __call__(self, capabilities: Capabilities, model: str) -> Sending:
        request = self.request
        if (
            isinstance(request, ChatCompletionRequest | CompletionRequest)
            and request.model != model
        ):
            request = request.model_copy(update={"model": model})
        return Sending(request)


class ChatCodec:
    """Chat: decoded as it came, encoded as OpenAI's answer or chunk frames."""

    async def decode(self, exchange: Exchange) -> Decoded:
        body = parse_body(ChatCompletionRequest, exchange.body)
        return Decoded(
            body.model,
            "chat",
            body,
            AsSent(body),
            stream=bool(body.stream),
            cached=ChatCompletion,
            call=body,
        )

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        body: ChatCompletionRequest = decoded.call
        return openai_reply(decoded, body.include_usage(), outcome, chat_chunks)


def openai_reply(decoded: Decoded, include_usage: bool, outcome: Outcome, chunks_of: Any) -> Reply:
    """Chat's and completions' reply: the answer's JSON, its frames, or a cache hit
    replayed as the stream the client asked for."""
    if outcome.stream is not None:
        return Reply(headers=outcome.headers, frames=frames(outcome.stream, include_usage))
    if outcome.cached and decoded.stream:
        replayed = replay_chunks(chunks_of(outcome.answer), include_usage)
        return Reply(headers=outcome.headers, frames=replayed)
    return Reply(jsonio.to_json(outcome.answer), outcome.headers)


async def frames(stream: ServedStream, include_usage: bool) -> AsyncIterator[bytes]:
    """The stream's frames as they come; then an error frame after a failure nothing
    could continue, the usage frame for clients that asked for it, and ``[DONE]``."""
    try:
        async for piece in stream.pieces():
            yield piece
    except GatewayError as failure:
        yield error_frame(failure) + DONE
        return
    usage_frame = stream.usage_frame
    yield usage_frame + DONE if usage_frame is not None and include_usage else DONE


async def replay_chunks(chunks: list[Any], include_usage: bool) -> AsyncIterator[bytes]:
    """Cached chunks as frames (the usage chunk only for clients that asked for it)."""
    for chunk in chunks:
        if chunk.choices or include_usage:
            yield frame(chunk)
    yield DONE
