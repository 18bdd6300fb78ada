"""``POST /v1/responses/input_tokens``: the input tokens a Responses request would take,
as OpenAI counts them (``{"object": "response.input_tokens", "input_tokens": N}``).

The request is read as ``POST /v1/responses`` reads it (its stored conversation, its
tools), then counted as Messages' ``count_tokens`` counts: exact where the model's first
deployment can count (a local engine with its chat template), estimated elsewhere;
``x-shunter-token-count`` says which. Nothing is generated, stored or spent."""

from __future__ import annotations

import json

from gateway.apis.contract import Exchange, Reply
from gateway.apis.responses.codec import prepare, read
from gateway.dispatch import describe_request


async def input_tokens(exchange: Exchange) -> Reply:
    call = read(exchange.body, stream=False, store=False)
    exchange.facts["model"] = call.model
    await prepare(exchange, call)
    chat = call.chat_request()
    backend = exchange.gateway.first_choice(call.model)
    if backend.capabilities.count_tokens:
        tokens, how = await backend.count_tokens(chat), "exact"
    else:
        tokens, how = describe_request(chat).prompt_tokens, "estimated"
    body = {"object": "response.input_tokens", "input_tokens": tokens}
    return Reply(json.dumps(body).encode(), {"x-shunter-token-count": how})
