"""The contract of one generation API on the shared request path
(:mod:`gateway.http.serving`): how it reads a body, what admission and routing see of it,
how one backend answers it whole or streamed, and how an answer is written.

One subclass per API, beside its route: :mod:`~gateway.http.chat`,
:mod:`~gateway.http.completions`, :mod:`~gateway.http.responses`,
:mod:`~gateway.http.messages`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from backends.base import Backend
from gateway.admission.admit import RequestFacts
from gateway.admission.keys import KeyInfo
from gateway.admission.sessions import SessionHint, SessionId
from gateway.dispatch import ServedStream
from gateway.errors import GatewayError
from gateway.http.intake import Services
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    Usage,
)
from gateway.protocol.fieldnames import FieldNames
from gateway.protocol.frames import FrameStream


class Served(Protocol):
    """What the request path reads of any parsed generation request."""

    @property
    def model(self) -> str: ...

    @property
    @abstractmethod
    def stream(self) -> bool | None: ...

    def include_usage(self) -> bool: ...


class Answer(Protocol):
    """What the request path reads of any whole answer: its usage, for settling."""

    @property
    def usage(self) -> Usage | None: ...


Req = TypeVar("Req", bound=Served)
Whole = TypeVar("Whole", bound=Answer)
Sent = TypeVar("Sent", ChatCompletionRequest, CompletionRequest)


def answered_by(request: Sent, model: str) -> Sent:
    """``request`` as sent to a deployment whose answers say ``model``.

    Every API's answer names the model that answered (the model the deployment asks its
    upstream for: :meth:`~gateway.dispatch.Gateway.answering_model`), as OpenAI's name the
    model it resolved, not the public name the client asked for. Backends write the
    ``model`` of the request they get into their answers, so that is where it is set; the
    translated APIs (Responses, Messages) read it back from the chat answer or chunks."""
    return request if request.model == model else request.model_copy(update={"model": model})


class Endpoint(ABC, Generic[Req, Whole]):
    """How one generation API maps onto the backends, from body to last byte.

    ``operation`` names it to telemetry; ``x_api_key``: the key may come in
    ``x-api-key`` (Anthropic's header); ``framed``: its streams are OpenAI chunk frames,
    which a resume can read back (the translated APIs are resumed through their
    translator instead); ``cached``: the answer type the response cache keeps."""

    operation: ClassVar[str]
    x_api_key: ClassVar[bool] = False
    framed: ClassVar[bool] = False
    cached: ClassVar[type[ChatCompletion] | type[Completion]] = ChatCompletion

    @abstractmethod
    def parse(self, raw: bytes) -> Req:
        """The request in ``raw`` (a 400 naming the offending field when invalid)."""

    async def prepare(self, services: Services, key: KeyInfo, body: Req) -> None:
        """Complete the request once the caller is known (a stored conversation)."""

    def cacheable(self, body: Req) -> bool:
        """Whether the response cache may answer ``body`` (by default whenever its rules
        say so)."""
        return True

    @abstractmethod
    def request(self, body: Req) -> ChatCompletionRequest | CompletionRequest:
        """The chat (or completion) request that the cache keys and routing describe."""

    @abstractmethod
    def facts(self, body: Req) -> RequestFacts:
        """What admission reserves for the request."""

    def session_hint(self, body: Req) -> SessionHint | None:
        """What the body says of its session (an id field), if anything; without one, the
        session is derived from the conversation
        (:func:`~gateway.admission.sessions.session_of`)."""
        return None

    def note_session(self, body: Req, session: SessionId) -> None:
        """The request's session, once known (Responses keeps it with the stored response,
        for the turns that continue it)."""

    def field_names(self, body: Req) -> FieldNames | None:
        """The chat request's field names as ``body``'s API names them, for a request
        translated to chat (none for chat itself, nor before the translation)."""
        return None

    @abstractmethod
    async def whole(self, backend: Backend, body: Req, model: str) -> Whole:
        """The whole answer of ``backend``, naming ``model`` as the model that answered
        (the chat or completion request it gets is :func:`answered_by` ``model``)."""

    @abstractmethod
    def stream(self, backend: Backend, body: Req, model: str) -> FrameStream:
        """``backend``'s answer as a stream of frames to write, naming ``model`` as the
        model that answered (as :meth:`whole`)."""

    def answer_headers(self, body: Req) -> dict[str, str]:
        """Headers the answer adds (what the request's translation dropped or clamped);
        none by default."""
        return {}

    @abstractmethod
    async def render(self, body: Req, answer: Whole) -> bytes:
        """A whole answer (or a cache hit) as the response body."""

    @abstractmethod
    def replay(self, body: Req, hit: Any) -> AsyncIterator[bytes]:
        """A cache hit as the stream the client asked for."""

    @abstractmethod
    def end(self, body: Req, stream: ServedStream, failure: GatewayError | None) -> bytes:
        """The last bytes of a stream: after a complete one, or the in-band error frames
        after a failure."""
