"""One attempt of a :class:`~gateway.dispatch.work.Work` on one deployment: what the
work's plan says that deployment is sent, and the backend call that sends it.

A refusal of what was sent (a 400 naming a chat field) is renamed here, with the
sending's own field names, as the client's API names the field.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from backends.base import Backend
from gateway.dispatch.work import NativeAnswer, Sending, Work
from gateway.errors import GatewayError, InvalidRequestError
from gateway.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    Usage,
)
from gateway.protocol.frames import Chunks, Framed, Stream


@dataclass(frozen=True)
class Sent:
    """A whole answer, what was sent for it, and the usage it is billed with."""

    sending: Sending
    value: Any
    usage: Usage | None


@dataclass(frozen=True)
class Started:
    """A stream just started, and what was sent for it: ``framed`` when its pieces are
    OpenAI chunk frames that a resume can read back."""

    stream: Stream[Any]
    sending: Sending | None = None
    framed: bool = False


async def answer_once(work: Work, backend: Backend, model: str) -> Sent:
    """``backend``'s whole answer to ``work``, naming ``model`` as the model that answered."""
    sending = work.plan(backend.capabilities, model)
    with _named(sending):
        native = sending.native
        if native is not None:
            body, usage = await backend.native(native.api, native.body, native.headers)
            return Sent(sending, NativeAnswer(body, usage), usage)
        request = sending.request
        if isinstance(request, EmbeddingRequest):
            if not backend.capabilities.embeddings:
                raise InvalidRequestError(
                    f"The model '{work.model}' does not serve embeddings.", param="model"
                )
            embedded = await backend.embeddings(request)
            # an upstream that reports no usage is billed the estimate admission reserved
            prompt = embedded.usage.prompt_tokens or work.facts.prompt_tokens
            return Sent(sending, embedded, Usage.of(prompt, 0))
        if isinstance(request, CompletionRequest):
            completed = await backend.completion(request)
            return Sent(sending, completed, completed.usage)
        assert isinstance(request, ChatCompletionRequest), "a plan sends a request"
        if work.hosted is not None:
            answered = await work.hosted.whole(backend, request)
        else:
            answered = await backend.chat(request)
        return Sent(sending, answered, answered.usage)


def start_once(work: Work, backend: Backend, model: str) -> Started:
    """``backend``'s stream for ``work``, in the work's form."""
    sending = work.plan(backend.capabilities, model)
    with _named(sending):
        native = sending.native
        if native is not None:
            stream = backend.native_stream(native.api, native.body, native.headers)
            return Started(stream, sending)
        request = sending.request
        if isinstance(request, CompletionRequest):
            return Started(Framed(backend.completion_stream(request)), sending, framed=True)
        assert isinstance(request, ChatCompletionRequest), "a stream is chat or completion"
        if work.hosted is not None:
            return Started(work.hosted.stream(backend, request), sending)  # type: ignore[arg-type]
        if work.form == "chunks":
            return Started(Chunks(backend.chat_stream(request)), sending)
        if backend.capabilities.chat_stream_raw:
            return Started(backend.chat_stream_raw(request), sending, framed=True)
        return Started(Framed(backend.chat_stream(request)), sending, framed=True)


@contextmanager
def _named(sending: Sending) -> Iterator[None]:
    """A refusal of what was sent names its field as the client's API does."""
    try:
        yield
    except GatewayError as exc:
        if sending.names is not None:
            sending.names.rename(exc)
        raise
