"""``POST /v1/completions``: text completions, the backends' own contract like chat."""

from __future__ import annotations

from gateway.admission.cache import completion_chunks
from gateway.apis.contract import Decoded, Exchange, Outcome, Reply, parse_body
from gateway.apis.openai.chat import AsSent, openai_reply
from gateway.protocol import Completion, CompletionRequest


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
            call=body,
        )

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        body: CompletionRequest = decoded.call
        return openai_reply(decoded, body.include_usage(), outcome, completion_chunks)
