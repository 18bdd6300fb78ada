"""Google's Gemini API: ``/v1beta/models/{model}:generateContent``,
``:streamGenerateContent``, ``:countTokens``, and the model listings.

A request routed to a deployment whose upstream speaks Gemini itself is passed through as
the client sent it; one routed elsewhere is translated to the gateway's chat request
(:mod:`~.translation`) under that deployment's rules, and its answer back
(:mod:`~.answer`, :mod:`~.events`). Errors take Google's shape and status names
(:mod:`~.errors`); the key comes in ``x-goog-api-key``, ``?key=`` (never logged: the
access line writes no query string) or ``Authorization: Bearer``.
"""

from __future__ import annotations

from gateway.apis.contract import Api, KeySources, Operation
from gateway.apis.gemini.codec import GenerateCodec
from gateway.apis.gemini.errors import gemini_error
from gateway.apis.gemini.handlers import count_tokens, get_model, list_models

_MODELS = "/v1beta/models"
_ONE = _MODELS + "/{model:path}"


def api() -> Api:
    return Api(
        name="gemini",
        operations=(
            Operation(
                "generate_content",
                _ONE,
                codec=GenerateCodec(stream=False),
                action="generateContent",
            ),
            Operation(
                "generate_content",
                _ONE,
                codec=GenerateCodec(stream=True),
                action="streamGenerateContent",
            ),
            Operation("count_tokens", _ONE, handler=count_tokens, action="countTokens"),
            Operation("models", _MODELS, ("GET",), handler=list_models),
            Operation("models", _ONE, ("GET",), handler=get_model),
        ),
        errors=gemini_error,
        keys=KeySources(headers=("x-goog-api-key", "authorization"), query=("key",)),
        prefixes=("/v1beta/",),
    )
