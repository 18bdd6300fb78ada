"""Embeddings: request and response, fields in OpenAI-doc order."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.protocol.common import RequestModel, ResponseModel


class EmbeddingRequest(RequestModel):
    input: str | list[str] | list[int] | list[list[int]]
    model: str
    dimensions: int | None = Field(default=None, ge=1)
    encoding_format: Literal["float", "base64"] | None = None
    user: str | None = None


class Embedding(ResponseModel):
    embedding: list[float] | str
    index: int = 0
    object: Literal["embedding"] = "embedding"


class EmbeddingUsage(ResponseModel):
    prompt_tokens: int = 0
    total_tokens: int = 0


class EmbeddingResponse(ResponseModel):
    data: list[Embedding]
    model: str
    object: Literal["list"] = "list"
    usage: EmbeddingUsage = EmbeddingUsage()
