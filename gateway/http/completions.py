"""``POST /v1/completions``: text completions, the backends' own contract like chat."""

from __future__ import annotations

from collections.abc import AsyncIterator

from litestar import asgi
from litestar.types import Receive, Scope, Send

from backends.base import Backend
from gateway.admission.admit import RequestFacts
from gateway.admission.cache import completion_chunks
from gateway.dispatch import ServedStream
from gateway.errors import GatewayError
from gateway.http.chat import openai_end, replay_chunks
from gateway.http.endpoint import Endpoint, answered_by
from gateway.http.intake import parse_body
from gateway.http.serving import handle
from gateway.protocol import Completion, CompletionRequest, jsonio
from gateway.protocol.frames import Framed, FrameStream


class CompletionsEndpoint(Endpoint[CompletionRequest, Completion]):
    operation = "text_completion"
    framed = True
    cached = Completion

    def parse(self, raw: bytes) -> CompletionRequest:
        return parse_body(CompletionRequest, raw)

    def request(self, body: CompletionRequest) -> CompletionRequest:
        return body

    def facts(self, body: CompletionRequest) -> RequestFacts:
        return RequestFacts.of_completion(body)

    async def whole(self, backend: Backend, body: CompletionRequest, model: str) -> Completion:
        return await backend.completion(answered_by(body, model))

    def stream(self, backend: Backend, body: CompletionRequest, model: str) -> FrameStream:
        return Framed(backend.completion_stream(answered_by(body, model)))

    async def render(self, body: CompletionRequest, answer: Completion) -> bytes:
        return jsonio.to_json(answer)

    def replay(self, body: CompletionRequest, hit: Completion) -> AsyncIterator[bytes]:
        return replay_chunks(completion_chunks(hit), body.include_usage())

    def end(
        self, body: CompletionRequest, stream: ServedStream, failure: GatewayError | None
    ) -> bytes:
        return openai_end(body, stream, failure)


COMPLETIONS = CompletionsEndpoint()


@asgi("/v1/completions", copy_scope=False)
async def completions(scope: Scope, receive: Receive, send: Send) -> None:
    await handle(scope, receive, send, COMPLETIONS)
