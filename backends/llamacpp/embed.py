"""Embeddings from a GGUF (``task: embed`` llama.cpp deployments).

The model is opened in llama.cpp's embedding mode (llama-cpp-python's ``Llama`` with
``embedding=True`` and a pooling type): each input is one sequence, pooled into one vector
and normalised to unit length, as OpenAI's embeddings are. Batches run one at a time on a
worker thread; an input longer than the context is refused (OpenAI's behaviour), never
truncated.
"""

from __future__ import annotations

import asyncio
import base64
import struct
from pathlib import Path
from typing import Any, Literal

from gateway.errors import ContextLengthExceededError, InvalidRequestError
from gateway.protocol import EmbeddingRequest, EmbeddingResponse
from gateway.protocol.embeddings import Embedding, EmbeddingUsage

Pooling = Literal["mean", "cls", "last"]
_POOLING = {
    "mean": "LLAMA_POOLING_TYPE_MEAN",
    "cls": "LLAMA_POOLING_TYPE_CLS",
    "last": "LLAMA_POOLING_TYPE_LAST",
}


class EmbeddingModel:
    """One GGUF in embedding mode; :meth:`embed` answers an OpenAI embeddings request."""

    def __init__(
        self, path: Path, *, n_ctx: int, threads: int, gpu_layers: int, pooling: Pooling
    ) -> None:
        self._path = path
        self._n_ctx = n_ctx
        self._threads = threads
        self._gpu_layers = gpu_layers
        self._pooling = pooling
        self._llm: Any = None
        self._lock = asyncio.Lock()

    @property
    def dimensions(self) -> int:
        return int(self._llm.n_embd()) if self._llm is not None else 0

    async def start(self) -> None:
        self._llm = await asyncio.to_thread(self._open)

    async def aclose(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            await asyncio.to_thread(llm.close)

    async def embed(self, request: EmbeddingRequest, model: str) -> EmbeddingResponse:
        texts = _texts(request.input)
        if request.dimensions is not None and request.dimensions != self.dimensions:
            raise InvalidRequestError(
                f"This model's embeddings have {self.dimensions} dimensions; "
                f"'dimensions' {request.dimensions} is not supported.",
                param="dimensions",
            )
        async with self._lock:
            vectors, tokens = await asyncio.to_thread(self._embed, texts)
        as_base64 = request.encoding_format == "base64"
        data = [
            Embedding(embedding=_base64(v) if as_base64 else v, index=i)
            for i, v in enumerate(vectors)
        ]
        return EmbeddingResponse(
            data=data, model=model, usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)
        )

    def _open(self) -> Any:
        import llama_cpp  # with the model, as the engine does: a config without one never loads it

        return llama_cpp.Llama(
            model_path=str(self._path),
            embedding=True,
            pooling_type=getattr(llama_cpp, _POOLING[self._pooling]),
            n_ctx=self._n_ctx,
            n_batch=self._n_ctx,
            n_ubatch=self._n_ctx,
            n_threads=self._threads,
            n_gpu_layers=self._gpu_layers,
            verbose=False,
        )

    def _embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        llm = self._llm
        assert llm is not None, "embedding model used before start()"
        try:
            vectors, tokens = llm.embed(texts, normalize=True, truncate=False, return_count=True)
        except ValueError as exc:  # llama-cpp-python: an input longer than the batch (= n_ctx)
            raise ContextLengthExceededError(
                f"This model embeds at most {self._n_ctx} tokens per input ({exc}).",
                param="input",
            ) from None
        return vectors, int(tokens)


def _texts(value: str | list[str] | list[int] | list[list[int]]) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not value:
        raise InvalidRequestError("'input' must not be empty.", param="input")
    if not all(isinstance(item, str) for item in value):
        raise InvalidRequestError(
            "This deployment embeds text: send 'input' as a string or a list of strings.",
            param="input",
        )
    texts = [item for item in value if isinstance(item, str)]
    if any(not text for text in texts):
        raise InvalidRequestError("'input' must not contain empty strings.", param="input")
    return texts


def _base64(vector: list[float]) -> str:
    """OpenAI's ``encoding_format: base64``: little-endian float32, base64-encoded."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
