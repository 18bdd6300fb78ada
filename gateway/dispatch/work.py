"""What dispatch is asked to run: one request, handed down whole by the request spine.

A client API decodes its request into a :class:`Work`: the request routing describes
(chat, completion or embeddings), the one description of it that admission and routing
both read, and its :attr:`~Work.plan`: a pure function of a deployment's capabilities
that says what that deployment is sent (:class:`Sending`): the chat request as that
deployment takes it (a Messages request translated under its rules), or the client's own
bytes for an upstream that speaks the client's API (:class:`Native`). Dispatch asks the
plan once per attempt and calls the backend itself; nothing below the spine calls back
into the API or the spine.

A stream comes back in the :attr:`~Work.form` the API encodes from: OpenAI ``frames``
(chat and completions, written as they are) or chat ``chunks`` (the translated APIs,
whose encoder turns them into their own events above the stream's survival: a resumed
stream goes on in chunks, and the encoder never knows).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from backends.base import Backend, Capabilities
from gateway.admission.admit import Admission, AdmissionTicket
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    Usage,
)
from gateway.protocol.fieldnames import FieldNames
from policies import RequestFacts

Routable = ChatCompletionRequest | CompletionRequest | EmbeddingRequest
Form = Literal["frames", "chunks"]


@dataclass(frozen=True)
class Native:
    """A request in the API an upstream speaks itself (``api``: ``messages``...): the
    client's ``body`` as sent (the backend sets ``model``) and the client's ``headers``
    that such an upstream gets."""

    api: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Sending:
    """What one deployment is sent: ``request`` (the chat, completion or embeddings
    request as it takes it), or ``native``; what translating for it ``dropped`` and the
    output budget it ``clamped`` to (the answer says both); ``names``: the chat request's
    field names as the client's API names them, for refusals of it."""

    request: Routable | None = None
    native: Native | None = None
    dropped: tuple[str, ...] = ()
    clamped: int | None = None
    names: FieldNames | None = None


Plan = Callable[[Capabilities, str], Sending]
"""What a deployment with these capabilities is sent, its answers naming this model."""


@dataclass(frozen=True)
class NativeAnswer:
    """A whole answer in the upstream's own API, ready to be written, and its usage."""

    body: bytes
    usage: Usage


class HostedLoop(Protocol):
    """The gateway's own tool loop over one deployment (:mod:`gateway.hosted.run`): the
    model is called until it calls none of the tools the gateway runs."""

    async def whole(self, backend: Backend, request: ChatCompletionRequest) -> ChatCompletion:
        """The last model answer, with the usage of every call."""
        ...

    def stream(
        self, backend: Backend, request: ChatCompletionRequest
    ) -> AsyncIterator[ChatCompletionChunk | Any]:
        """Every round's chunks, with the loop's steps between them."""
        ...


@dataclass
class Work:
    """One admitted request, as dispatch runs it.

    ``routed``: what routing describes and a resume continues; ``facts``: its one
    description; ``plan``: what each deployment is sent; ``stream`` and ``form``: a stream,
    and in which form; ``hosted``: the gateway's tool loop, when the request has tools the
    gateway runs; ``admission`` and ``ticket``: each deployment's own limits are taken
    before it is tried; ``notes``: what the request's log line says of the run."""

    model: str
    operation: str
    routed: Routable
    facts: RequestFacts
    plan: Plan
    stream: bool = False
    form: Form = "frames"
    hosted: HostedLoop | None = None
    admission: Admission | None = None
    ticket: AdmissionTicket | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    async def admit(self, deployment: str) -> None:
        """Take ``deployment``'s own limits before it is tried (raises when they refuse)."""
        if self.admission is not None and self.ticket is not None:
            await self.admission.admit_deployment(self.ticket, deployment)

    @property
    def admits(self) -> bool:
        return self.admission is not None and self.ticket is not None
