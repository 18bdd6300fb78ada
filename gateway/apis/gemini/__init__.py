"""Google's Gemini API: ``/v1beta/models/{model}:generateContent``,
``:streamGenerateContent``, ``:countTokens`` (and the same under ``/v1``, the version
Google's Python SDK calls by default), and the model listings (``/v1beta`` only: ``GET
/v1/models`` is OpenAI's).

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
_ONE = "/models/{model_id:path}"  # the parameter is named as OpenAI's /v1/models/{model_id}
_VERSIONS = ("/v1beta", "/v1")  # Google's SDKs call either


def api() -> Api:
    return Api(
        name="gemini",
        operations=(
            *(operation for version in _VERSIONS for operation in _generation(version + _ONE)),
            Operation("models", _MODELS, ("GET",), handler=list_models),
            Operation("models", "/v1beta" + _ONE, ("GET",), handler=get_model),
        ),
        errors=gemini_error,
        keys=KeySources(headers=("x-goog-api-key", "authorization"), query=("key",)),
        prefixes=("/v1beta/",),
    )


def _generation(path: str) -> tuple[Operation, ...]:
    """The custom methods on a model: ``{model}:generateContent`` and the others."""
    whole, streamed = GenerateCodec(stream=False), GenerateCodec(stream=True)
    return (
        Operation("generate_content", path, codec=whole, action="generateContent"),
        Operation("generate_content", path, codec=streamed, action="streamGenerateContent"),
        Operation("count_tokens", path, handler=count_tokens, action="countTokens"),
    )
