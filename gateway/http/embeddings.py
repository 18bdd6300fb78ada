"""``POST /v1/embeddings``: the same admission as generation (the key before the body is
read, its model scope, limits and budget, each deployment's limits), settled with the
real input tokens at the deployment's input price."""

from __future__ import annotations

from collections.abc import Awaitable

from litestar import asgi
from litestar.types import ASGIApp, Receive, Scope, Send

from backends.base import Backend
from gateway.admission.admit import RequestFacts
from gateway.dispatch import describe_request
from gateway.errors import GatewayError, InvalidRequestError
from gateway.http.abilities import embedder
from gateway.http.intake import arrive, json_response, parse_body
from gateway.http.serving import Admitted, respond
from gateway.protocol import EmbeddingRequest, EmbeddingResponse, Usage


@asgi("/v1/embeddings", copy_scope=False)
async def embeddings(scope: Scope, receive: Receive, send: Send) -> None:
    arrival = await arrive(scope, receive)
    body = parse_body(EmbeddingRequest, arrival.body)
    arrival.facts["model"] = body.model
    services = arrival.services
    ticket = await services.admission.admit(RequestFacts.of_embeddings(body), arrival.key)
    admitted = Admitted(arrival, ticket)

    def serve() -> Awaitable[ASGIApp]:
        return _embed(admitted, body)

    try:
        await respond(scope, receive, send, admitted, serve)
    except GatewayError as exc:
        if exc.param == "messages":  # the shared refusals name chat's field
            exc.param = "input"
        raise


async def _embed(admitted: Admitted, body: EmbeddingRequest) -> ASGIApp:
    async def embed(backend: Backend) -> EmbeddingResponse:
        able = embedder(backend)
        if able is None:
            raise InvalidRequestError(
                f"The model '{body.model}' does not serve embeddings.", param="model"
            )
        return await able.embeddings(body)

    routing_facts = describe_request(body, admitted.request_id)
    routed = await admitted.gateway.call(
        body.model, embed, "embeddings", admitted.admit, routing_facts
    )
    # an upstream that reports no usage is charged the estimate admission reserved
    usage = Usage.of(routed.value.usage.prompt_tokens or admitted.ticket.tokens, 0)
    admitted.facts.update(deployment=routed.deployment, route=routed.reason)
    await admitted.settle(routed.bill(usage))
    headers = {"x-shunter-deployment": routed.deployment, "x-shunter-route": routed.reason}
    return json_response(routed.value, admitted.headers(headers))
