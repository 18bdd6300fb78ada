"""``POST /v1/embeddings``: the same admission as generation (the key before the body is
read, its model scope, limits and budget, each deployment's limits), settled with the
real input tokens at the deployment's input price. An upstream that reports no usage is
charged the estimate admission reserved."""

from __future__ import annotations

from gateway.apis.contract import Decoded, Exchange, Outcome, Reply, parse_body
from gateway.apis.openai.chat import AsSent
from gateway.protocol import EmbeddingRequest, jsonio
from gateway.protocol.fieldnames import FieldNames, Site

_NAMES = FieldNames(
    top={name: Site(name) for name in EmbeddingRequest.model_fields}
    | {"messages": Site("input")}  # the shared refusals of a prompt name chat's field
)


class EmbeddingsCodec:
    """Embeddings: decoded as they came, never cached, answered whole."""

    async def decode(self, exchange: Exchange) -> Decoded:
        body = parse_body(EmbeddingRequest, exchange.body)
        return Decoded(body.model, "embeddings", body, AsSent(body), names=_NAMES, call=body)

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        return Reply(jsonio.to_json(outcome.answer), outcome.headers)
