"""One sequence's KV state read out of, and written into, the scheduler's context.

The context keeps one KV stream per sequence (``kv_unified=False``), so llama.cpp reads and
writes one sequence's state alone (``llama_state_seq_get_data`` / ``_set_data``). Both run
on the scheduler thread, which owns the context, between two decode steps
(:meth:`~backends.llamacpp.batch.Scheduler.call`).

* Export: an idle sequence holding the prefix link gives its whole state (every token its
  KV holds, which may reach past the link) into a ctypes buffer. When only a running
  sequence holds the link, the export is refused (409 ``kv_busy``): its KV changes with
  every step, and the tokens up to the link alone cannot be read out of it.
* Import: a free sequence (the one holding the fewest tokens: the least cached KV lost, as
  :mod:`~backends.llamacpp.placement` chooses) is cleared and written; a write llama.cpp
  refuses, or a state that does not hold exactly the header's tokens, leaves it empty.

:func:`model_fingerprint` says what a state must have been computed with
(:class:`~backends.kv.KvFingerprint`): the model file's sha256 (the whole file: a cheaper
hash of its header and ends would miss a fine-tune that changes only middle layers, and a
state from other weights is silently wrong, never refused by llama.cpp), computed once per
load, off the event loop; the model's shape as llama.cpp reports it; the KV cache types;
flash attention as configured; llama.cpp's state format version.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from backends.kv import CHUNK_BYTES, KvFingerprint, KvHeader, kv_not_found
from backends.llamacpp.held import HeldChains
from backends.llamacpp.placement import Placement
from backends.llamacpp.sequences import Seq
from gateway.errors import (
    ConflictError,
    InvalidRequestError,
    RequestTooLargeError,
    ServiceUnavailableError,
)

_BYTES_PER_VALUE = {"f16": 2.0, "q8_0": 34 / 32}  # q8_0: 32 values in 34 bytes
_CELL_BYTES = 16  # a cell's position and sequence ids
_STATE_OVERHEAD = 1 << 20  # per-layer descriptors and the state's own header, at most
_HASH_BLOCK = 8 << 20

Buffer = Any  # a ctypes array of c_uint8


def model_shape(
    model: Any, kv_cache_type: str, flash_attn: bool | str, sequences: int
) -> dict[str, Any]:
    """The fingerprint's parts read from a loaded model and the context's settings."""
    import llama_cpp

    pointer = model.pointer
    return {
        "n_layer": int(llama_cpp.llama_model_n_layer(pointer)),
        "n_embd": int(llama_cpp.llama_model_n_embd(pointer)),
        "n_head": int(llama_cpp.llama_model_n_head(pointer)),
        "n_head_kv": int(llama_cpp.llama_model_n_head_kv(pointer)),
        "type_k": kv_cache_type,
        "type_v": kv_cache_type,
        "flash_attn": "on" if flash_attn is True else "off" if flash_attn is False else "auto",
        "sequences": sequences,
        "state_version": int(llama_cpp.LLAMA_STATE_SEQ_VERSION),
        "engine": f"llama-cpp-python {llama_cpp.__version__}",
    }


def model_fingerprint(path: Path, shape: dict[str, Any]) -> KvFingerprint:
    """The fingerprint of ``path`` loaded with ``shape`` (reads the whole file: run it off
    the event loop; about a second per 1-2 GB)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(_HASH_BLOCK):
            digest.update(block)
    return KvFingerprint(model_sha256=digest.hexdigest(), **shape)


def state_bound(model: Any, n_ctx_seq: int, kv_cache_type: str) -> int:
    """The most bytes a full sequence's state takes in this engine: ``n_ctx_seq`` cells of
    keys and values in every layer, and the state's fixed overhead."""
    import llama_cpp

    pointer = model.pointer
    n_embd, n_head = llama_cpp.llama_model_n_embd(pointer), llama_cpp.llama_model_n_head(pointer)
    arch = model.metadata.get("general.architecture", "")
    head_k = int(model.metadata.get(f"{arch}.attention.key_length", n_embd // max(n_head, 1)))
    head_v = int(model.metadata.get(f"{arch}.attention.value_length", head_k))
    values = llama_cpp.llama_model_n_layer(pointer) * llama_cpp.llama_model_n_head_kv(pointer)
    per_cell = values * (head_k + head_v) * _BYTES_PER_VALUE[kv_cache_type] + _CELL_BYTES
    return int(n_ctx_seq * per_cell) + _STATE_OVERHEAD


class SeqStates:
    """Reads and writes whole sequence states; the scheduler thread's only."""

    def __init__(
        self, ctx: Any, mem: Any, seqs: list[Seq], held: HeldChains, placement: Placement
    ) -> None:
        self._ctx = ctx
        self._mem = mem
        self._seqs = seqs
        self._held = held
        self._placement = placement

    def export(self, link: str, fingerprint: KvFingerprint, name: str) -> tuple[KvHeader, Buffer]:
        """The state of the idle sequence holding ``link`` deepest (see the module docstring)."""
        import llama_cpp

        seq = self._holder(link, name)
        size = int(llama_cpp.llama_state_seq_get_size(self._ctx, seq.id))
        buffer = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data(self._ctx, buffer, size, seq.id))
        if written != size:
            raise ServiceUnavailableError(
                f"llama.cpp wrote {written} of {size} bytes of sequence {seq.id}'s state"
            )
        header = KvHeader(
            fingerprint=fingerprint,
            tokens=list(seq.tokens),
            chain=list(self._held.links(seq.id)),
            n_bytes=size,
        )
        return header, buffer

    def _holder(self, link: str, name: str) -> Seq:
        holders = [
            (depth, len(seq.tokens), seq)
            for seq in self._seqs
            for held, depth in self._held.links(seq.id)
            if held == link
        ]
        if not holders:
            raise kv_not_found(name, link)
        idle = [h for h in holders if h[2].task is None]
        if not idle:
            raise ConflictError(
                f"deployment {name!r}: only a running sequence holds the prefix link "
                f"{link!r}; its KV can be moved once its request finishes",
                code="kv_busy",
                retry_after=1.0,
                should_retry=True,
            )
        return max(idle, key=lambda h: (h[0], h[1], -h[2].id))[2]

    def load(self, header: KvHeader, buffer: Buffer) -> int:
        """Write the state into a free sequence; its prefix cache then holds the header's
        tokens and links. The sequence's id."""
        import llama_cpp

        free = [s for s in self._seqs if s.task is None]
        if not free:
            raise ServiceUnavailableError(
                f"all {len(self._seqs)} sequences are running; retry the KV import later",
                code="kv_no_free_sequence",
                retry_after=1.0,
            )
        seq = min(free, key=lambda s: (len(s.tokens), s.id))
        self._placement.trim(seq, 0)
        read = int(llama_cpp.llama_state_seq_set_data(self._ctx, buffer, header.n_bytes, seq.id))
        n = len(header.tokens)
        low = int(llama_cpp.llama_memory_seq_pos_min(self._mem, seq.id))
        high = int(llama_cpp.llama_memory_seq_pos_max(self._mem, seq.id))
        if read != header.n_bytes or (low, high) != (0, n - 1):
            llama_cpp.llama_memory_seq_rm(self._mem, seq.id, -1, -1)
            raise InvalidRequestError(
                f"llama.cpp did not take the KV state ({read} of {header.n_bytes} bytes read, "
                f"positions {low}..{high} for {n} tokens); nothing was kept",
                code="kv_invalid",
            )
        seq.tokens = list(header.tokens)
        self._held.assign(seq.id, [(h, d) for h, d in header.chain if 0 < d <= n])
        return seq.id


async def state_chunks(buffer: Buffer) -> AsyncIterator[bytes]:
    """A state's bytes in slices of :data:`~backends.kv.CHUNK_BYTES` (never whole)."""
    view = memoryview(buffer).cast("B")
    for start in range(0, view.nbytes, CHUNK_BYTES):
        yield bytes(view[start : start + CHUNK_BYTES])


async def receive_state(n_bytes: int, chunks: AsyncIterator[bytes]) -> Buffer:
    """Exactly ``n_bytes`` of ``chunks`` in a buffer allocated once: 413 for a stream that
    sends more (cut there), 400 ``kv_incomplete`` for one that ends short."""
    buffer = (ctypes.c_uint8 * n_bytes)()
    view = memoryview(buffer).cast("B")
    got = 0
    async for chunk in chunks:
        end = got + len(chunk)
        if end > n_bytes:
            raise RequestTooLargeError(
                f"the KV stream sent more than the {n_bytes} bytes its header declared",
                code="kv_too_large",
            )
        view[got:end] = chunk
        got = end
    if got < n_bytes:
        raise InvalidRequestError(
            f"the KV stream ended after {got} of {n_bytes} bytes; nothing was imported",
            code="kv_incomplete",
        )
    return buffer
