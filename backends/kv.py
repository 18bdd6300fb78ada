"""Moving one sequence's KV cache between engines: what travels with the bytes, and how it
travels.

An engine that can export a sequence (:meth:`backends.base.Backend.export_kv`) hands over a
:class:`KvHeader` and the sequence's state as chunks of bytes; an engine that imports one
(:meth:`~backends.base.Backend.import_kv`) checks the header, takes exactly
``header.n_bytes`` bytes and answers a :class:`KvImported`.

The state is valid only in an engine that computes exactly as the source did: the same
model file, the same KV cache types, the same attention kernel, the same state format.
:class:`KvFingerprint` holds those parts; engines compare the whole of it, and a refusal
names the parts that differ (:meth:`KvFingerprint.differences`). The context length is not
part of it: a state fits any sequence with room for its tokens.

On the wire (a worker's ``GET /v1/worker/kv/{link}`` and ``PUT /v1/worker/kv``) a move is
one JSON line, the header, then the raw state: :func:`encode_header` and
:func:`split_header`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import InvalidRequestError, NotFoundError

CHUNK_BYTES = 1 << 20
"""The size of the slices a state is sent in."""

HEADER_MAX_BYTES = 16 << 20
"""The longest header line taken (it lists the token ids: about 8 bytes each)."""

KV_MEDIA_TYPE = "application/octet-stream"


class KvFingerprint(BaseModel):
    """What must be equal for one engine's KV state to be valid in another."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_sha256: str = Field(description="sha256 of the whole model file")
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    type_k: str = Field(description="KV cache type of keys (f16, q8_0)")
    type_v: str
    flash_attn: str = Field(description="flash attention as configured: on, off, auto")
    sequences: int = Field(
        description="sequences the context holds (--parallel): llama.cpp reads a sequence's "
        "state only into a context of as many"
    )
    state_version: int = Field(description="the engine's sequence state format version")
    engine: str = Field(description="the engine and its version")

    @property
    def digest(self) -> str:
        """A short hash of every part: equal digests, equal fingerprints."""
        text = json.dumps(self.model_dump(), sort_keys=True).encode()
        return hashlib.sha256(text).hexdigest()[:32]

    def differences(self, other: KvFingerprint) -> list[str]:
        """The parts that differ, each as ``name: this != other``."""
        mine, theirs = self.model_dump(), other.model_dump()
        return [f"{k}: {mine[k]} != {theirs[k]}" for k in mine if mine[k] != theirs[k]]


class KvHeader(BaseModel):
    """One sequence's KV state, described: where it came from, what it holds, its size."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fingerprint: KvFingerprint
    tokens: list[int] = Field(description="the token ids the KV holds, positions 0..n-1")
    chain: list[tuple[str, int]] = Field(
        default_factory=list, description="the prefix links it holds, (hash, depth in tokens)"
    )
    n_bytes: int = Field(ge=1, description="the state's size in bytes")


class KvImported(BaseModel):
    """What an import took: tokens now cached, bytes received, seconds from start to end."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: int
    bytes: int
    seconds: float


def kv_not_found(deployment: str, link: str) -> NotFoundError:
    """The error for a link no sequence of ``deployment`` holds."""
    return NotFoundError(
        f"deployment {deployment!r} holds no KV for the prefix link {link!r}",
        code="kv_not_found",
    )


def encode_header(header: KvHeader) -> bytes:
    """The header as the wire's first line."""
    return header.model_dump_json().encode() + b"\n"


async def split_header(
    chunks: AsyncIterator[bytes], limit: int = HEADER_MAX_BYTES
) -> tuple[KvHeader, AsyncIterator[bytes]]:
    """Read the header line off a wire stream: the header, and the rest of the stream
    (the state's bytes). 400 for a stream without a valid header line within ``limit``."""
    head = bytearray()
    async for chunk in chunks:
        end = chunk.find(b"\n")
        if end < 0:
            head += chunk
            if len(head) > limit:
                break
            continue
        head += chunk[:end]
        if len(head) > limit:
            break
        return _header(bytes(head)), _rest(chunk[end + 1 :], chunks)
    raise InvalidRequestError(
        f"a KV stream starts with one JSON header line of at most {limit} bytes",
        code="kv_invalid",
    )


def _header(line: bytes) -> KvHeader:
    try:
        return KvHeader.model_validate_json(line)
    except ValueError as exc:
        raise InvalidRequestError(f"invalid KV header: {exc}", code="kv_invalid") from None


async def _rest(first: bytes, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in chunks:
        yield chunk
