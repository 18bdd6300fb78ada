"""``:countTokens`` and the model listings of the Gemini API.

``countTokens`` counts a request's prompt tokens, exactly where the model's first
deployment can (an upstream that speaks Gemini counts the body as sent; a local engine
with its chat template), estimated elsewhere; ``x-shunter-token-count`` says which
(``upstream``, ``exact``, ``estimated``). ``GET /v1beta/models`` and
``/v1beta/models/{model}`` list the models the caller's key may use, as Gemini's ``Model``
objects (``name: "models/<id>"``, ``inputTokenLimit`` where a deployment's context is
known).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from backends.base import Backend
from gateway.admission.keys import check_model, may_use
from gateway.apis.contract import Exchange, Reply
from gateway.apis.gemini.codec import path_model
from gateway.apis.gemini.protocol import CountTokensRequest, GenerateContentRequest
from gateway.apis.gemini.translation import NATIVE, translate
from gateway.dispatch import describe_request
from gateway.errors import GatewayError, InvalidRequestError, NotFoundError
from gateway.protocol.rawbody import RawBody
from gateway.protocol.validation import request_error

METHODS = ("generateContent", "streamGenerateContent", "countTokens")


async def count_tokens(exchange: Exchange) -> Reply:
    model = path_model(exchange)
    check_model(exchange.key, model)  # a key counts only on the models it may use
    body = _count_request(exchange.body)
    done = translate(body, model, lenient=True)
    backend = exchange.gateway.first_choice(model)
    try:
        tokens, how = await _counted(backend, exchange.body, done.chat)
    except GatewayError as exc:
        done.names.rename(exc)
        raise
    reply = json.dumps({"totalTokens": tokens}, separators=(",", ":")).encode()
    return Reply(reply, {"x-shunter-token-count": how})


def _count_request(raw: bytes) -> GenerateContentRequest:
    """The request to count: ``contents``, or the ``generateContentRequest`` as a whole."""
    data = RawBody.read(raw).data
    try:
        parsed = CountTokensRequest.model_validate(data)
    except ValidationError as exc:
        raise request_error(exc) from exc
    if parsed.generate_content_request is not None:
        return parsed.generate_content_request
    if not parsed.contents:
        raise InvalidRequestError(
            "contents: send contents, or a generateContentRequest, to count.", param="contents"
        )
    return GenerateContentRequest(contents=parsed.contents)


async def _counted(backend: Backend, raw: bytes, chat: Any) -> tuple[int, str]:
    capabilities = backend.capabilities
    if NATIVE in capabilities.native_apis:
        return await backend.count_native_tokens(NATIVE, raw), "upstream"
    if capabilities.count_tokens:
        return await backend.count_tokens(chat), "exact"
    return describe_request(chat, prefixes=False).prompt_tokens, "estimated"


async def list_models(exchange: Exchange) -> Reply:
    models = [_model(exchange, name) for name in _visible(exchange)]
    return Reply(json.dumps({"models": models}).encode())


async def get_model(exchange: Exchange) -> Reply:
    name = str(exchange.path_params.get("model_id", "")).lstrip("/").removeprefix("models/")
    if name not in _visible(exchange):
        raise NotFoundError(f"Model models/{name} is not found or is not served here.")
    return Reply(json.dumps(_model(exchange, name)).encode())


def _visible(exchange: Exchange) -> list[str]:
    key = exchange.key
    names = [model.id for model in exchange.gateway.model_list().data]
    return names if key.models is None else [n for n in names if may_use(key, n)]


def _model(exchange: Exchange, name: str) -> dict[str, Any]:
    """Gemini's ``Model`` for the served model ``name``."""
    out: dict[str, Any] = {
        "name": f"models/{name}",
        "baseModelId": name,
        "version": "1",
        "displayName": name,
        "description": f"{name}, served by Shunter",
    }
    pool = exchange.gateway.policy_candidates(name, live=False)
    lengths = [c.facts.capabilities.context_length for c in pool]
    known = [length for length in lengths if length is not None]
    if known:
        out["inputTokenLimit"] = min(known)
        out["outputTokenLimit"] = min(known)
    out["supportedGenerationMethods"] = list(METHODS)
    return out
