"""OpenAI's own API: chat completions, text completions, embeddings and the model list.

Its errors are OpenAI's ``{"error": {"message", "type", "param", "code"}}``; its key comes
in ``Authorization: Bearer``. Every ``/v1`` path no other API claims answers in its shape.
"""

from __future__ import annotations

from gateway.apis.contract import Api, Operation, openai_error
from gateway.apis.openai.chat import ChatCodec
from gateway.apis.openai.completions import CompletionsCodec
from gateway.apis.openai.embeddings import EmbeddingsCodec
from gateway.apis.openai.models import list_models, retrieve_model


def api() -> Api:
    return Api(
        name="openai",
        operations=(
            Operation("chat", "/v1/chat/completions", codec=ChatCodec()),
            Operation("text_completion", "/v1/completions", codec=CompletionsCodec()),
            Operation("embeddings", "/v1/embeddings", codec=EmbeddingsCodec()),
            Operation("models", "/v1/models", ("GET",), handler=list_models),
            Operation("models", "/v1/models/{model_id:path}", ("GET",), handler=retrieve_model),
        ),
        errors=openai_error,
        prefixes=("/v1/",),
    )
