"""``POST /v1/messages/count_tokens``: a request's prompt tokens, exact where the model's
first deployment can count (a local engine with its chat template, or an Anthropic
upstream's own count, which gets the body as sent), estimated elsewhere.
``x-shunter-token-count`` says which: ``exact``, ``upstream`` or ``estimated``. The call
counts as a request against the key's limit; nothing is generated, nothing is spent. A
large body is read and counted off the event loop."""

from __future__ import annotations

import asyncio
import json

from backends.base import Backend
from gateway.admission.keys import check_model
from gateway.apis.anthropic.codec import NATIVE, forwarded
from gateway.apis.anthropic.translation import MessagesCall
from gateway.apis.contract import Exchange, Reply
from gateway.dispatch import describe_request
from gateway.errors import GatewayError
from gateway.protocol.messages import CountTokensRequest
from gateway.telemetry.tracing import note_request

OFF_LOOP_BYTES = 256 * 1024  # a body this large is read and estimated in a thread


async def count_tokens(exchange: Exchange) -> Reply:
    headers = forwarded(exchange)
    raw = exchange.body
    if len(raw) > OFF_LOOP_BYTES:
        call = await asyncio.to_thread(_read, raw, headers)
    else:
        call = _read(raw, headers)
    note_request(call.body)
    exchange.facts["model"] = call.model
    check_model(exchange.key, call.model)  # a key counts only on the models it may use
    backend = exchange.gateway.first_choice(call.model)
    try:
        tokens, how = await _counted(backend, call, len(raw))
    except GatewayError as exc:
        if call.names is not None:  # counted on the chat request: named as sent
            call.names.rename(exc)
        raise
    body = json.dumps({"input_tokens": tokens}, separators=(",", ":")).encode()
    return Reply(body, {"x-shunter-token-count": how})


def _read(raw: bytes, headers: dict[str, str]) -> MessagesCall:
    call = MessagesCall.read(raw, headers, CountTokensRequest)
    call.routed()  # translated here, off the loop when the body is large
    return call


async def _counted(backend: Backend, call: MessagesCall, size: int) -> tuple[int, str]:
    """The prompt tokens of ``call`` and how they were counted."""
    capabilities = backend.capabilities
    if NATIVE in capabilities.native_apis:
        body = call.native(count=True)
        return await backend.count_native_tokens(NATIVE, body, call.headers), "upstream"
    if capabilities.count_tokens:
        return await backend.count_tokens(call.routed()), "exact"
    routed = call.routed()
    if size > OFF_LOOP_BYTES:
        estimate = await asyncio.to_thread(describe_request, routed, prefixes=False)
    else:
        estimate = describe_request(routed, prefixes=False)
    return estimate.prompt_tokens, "estimated"
