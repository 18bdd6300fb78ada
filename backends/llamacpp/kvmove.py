"""A llama.cpp deployment's KV moves, on the event loop: the checks, the bounds, the bytes.

An export hands over the engine's header and its state buffer in 1 MiB slices. An import
is checked from its header alone before a byte of the state is read (the fingerprint, the
tokens, the size against ``kv_move_max_mb`` and what a full sequence takes here), then
received into one buffer of the declared size within ``kv_move_timeout_s``, and only then
written into a sequence: a stream that ends early, sends too much or fails leaves every
sequence as it was. One import runs at a time (each holds a whole state in memory).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from backends.kv import KvHeader, KvImported
from backends.llamacpp.engine import LlamaEngine
from backends.llamacpp.kvstate import receive_state, state_chunks
from backends.llamacpp.settings import LlamaCppSettings
from gateway.errors import (
    ConflictError,
    InvalidRequestError,
    RequestTooLargeError,
    ServiceUnavailableError,
    UpstreamTimeoutError,
)


class KvMover:
    """Exports and imports the KV states of one engine's sequences."""

    def __init__(self, engine: LlamaEngine, settings: LlamaCppSettings) -> None:
        self._engine = engine
        self._settings = settings
        self._importing = False

    async def export(self, link: str) -> tuple[KvHeader, AsyncIterator[bytes]]:
        """An idle sequence's whole state (see ``kvstate.py``), in 1 MiB slices."""
        header, buffer = await self._engine.export_kv(link)
        return header, state_chunks(buffer)

    async def load(self, header: KvHeader, chunks: AsyncIterator[bytes]) -> KvImported:
        """Check the header, receive exactly its bytes in time, write them into a free
        sequence (see the module docstring)."""
        self.check(header)
        if self._importing:
            raise ServiceUnavailableError(
                f"deployment {self._settings.name!r} is taking another KV state; retry shortly",
                code="kv_import_busy",
                retry_after=1.0,
            )
        self._importing = True
        started = time.perf_counter()
        timeout_s = self._settings.kv_move_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                buffer = await receive_state(header.n_bytes, chunks)
                await self._engine.import_kv(header, buffer)
        except TimeoutError:
            raise UpstreamTimeoutError(
                f"the KV state did not arrive whole within {timeout_s:g}s "
                "(kv_move_timeout_s); nothing was imported",
                code="kv_timeout",
            ) from None
        finally:
            self._importing = False
        seconds = time.perf_counter() - started
        return KvImported(tokens=len(header.tokens), bytes=header.n_bytes, seconds=seconds)

    def check(self, header: KvHeader) -> None:
        """Refuse a state this engine cannot take: another engine's fingerprint (409
        ``kv_mismatch``, naming the parts that differ), no room for its tokens in a
        sequence, tokens outside the vocabulary, or more bytes than ``kv_move_max_mb`` and
        a full sequence take (413)."""
        engine, name = self._engine, self._settings.name
        own = engine.ready_fingerprint()
        if header.fingerprint != own:
            differ = "; ".join(header.fingerprint.differences(own))
            raise ConflictError(
                f"deployment {name!r} cannot use this KV state: it was computed by another "
                f"engine or model (source != here: {differ})",
                code="kv_mismatch",
            )
        n, n_ctx_seq = len(header.tokens), engine.n_ctx_per_slot
        if not 0 < n < n_ctx_seq:
            raise InvalidRequestError(
                f"the KV state holds {n} tokens; a sequence of {name!r} takes 1 to {n_ctx_seq - 1}",
                code="kv_invalid",
            )
        if min(header.tokens) < 0 or max(header.tokens) >= engine.model.n_vocab:
            raise InvalidRequestError(
                "the KV state's tokens are outside the vocabulary", code="kv_invalid"
            )
        max_bytes = self._settings.kv_move_max_mb << 20
        bound = min(max_bytes, engine.state_bound)
        if header.n_bytes > bound:
            raise RequestTooLargeError(
                f"the KV state is {header.n_bytes} bytes; {name!r} takes at most {bound} "
                f"(kv_move_max_mb: {max_bytes} bytes; a full sequence: {engine.state_bound})",
                code="kv_too_large",
            )
