"""``POST /v1/completions``: text completions, the backends' own contract like chat."""

from __future__ import annotations

from gateway.admission.cache import completion_chunks
from gateway.apis.contract import Decoded, Exchange, Outcome, Reply, parse_body
from gateway.apis.openai.chat import AsSent, openai_reply
from gateway.protocol import Completion, CompletionRequest
from gateway.protocol.fieldnames import FieldNames


class PromptNames(FieldNames):
    """A text completion's field names: its own, but for what the request path says of
    every prompt in chat's words (``messages``: a context overflow measured by routing),
    which is its ``prompt``."""

    def __init__(self) -> None:
        super().__init__(top={})

    def name(self, chat: str) -> str | None:
        return "prompt" if chat.split("[", 1)[0].split(".", 1)[0] == "messages" else chat


class CompletionsCodec:
    """Text completions: decoded as they came, encoded as OpenAI's answer or frames."""

    async def decode(self, exchange: Exchange) -> Decoded:
        body = parse_body(CompletionRequest, exchange.body)
        return Decoded(
            body.model,
            "text_completion",
            body,
            AsSent(body),
            stream=bool(body.stream),
            cached=Completion,
            names=PromptNames(),
            call=body,
        )

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        body: CompletionRequest = decoded.call
        return openai_reply(decoded, body.include_usage(), outcome, completion_chunks)
