"""One sequence's KV cache moved between two engines (the generated tiny model): the next
turn answers the same on either side and is served from the moved KV; an incompatible
engine, a cut stream, an oversized state and a running sequence are refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from backends.kv import KvHeader, encode_header, split_header
from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.settings import LlamaCppSettings
from gateway.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    RequestTooLargeError,
)
from gateway.models.demo import write_demo_model
from gateway.protocol import ChatCompletion, ChatCompletionRequest

SYSTEM = "You are a careful assistant for the Shunter test suite. " * 8


async def _backend(model: Path, **overrides: Any) -> LlamaCppBackend:
    values: dict[str, Any] = {
        "name": "tiny",
        "backend": "llamacpp",
        "model": str(model),
        "n_ctx": 1024,
        "parallel": 2,
        "threads": 1,
        **overrides,
    }
    backend = LlamaCppBackend(LlamaCppSettings.model_validate(values))
    await backend.start()
    await _fingerprinted(backend)
    return backend


async def _fingerprinted(backend: LlamaCppBackend) -> None:
    hashing = backend.engine._hashing  # the model file's hash, computed after the load
    if hashing is not None:
        await hashing
    assert backend.stats().kv_fingerprint is not None


@pytest.fixture
async def pair(tiny_model: Path) -> AsyncIterator[tuple[LlamaCppBackend, LlamaCppBackend]]:
    home, away = await _backend(tiny_model), await _backend(tiny_model)
    yield home, away
    await home.aclose()
    await away.aclose()


def _chat(messages: list[dict[str, str]], **extra: Any) -> ChatCompletionRequest:
    body = {"model": "tiny", "messages": messages, "max_tokens": 24, "temperature": 0, **extra}
    return ChatCompletionRequest.model_validate(body)


def _deepest(backend: LlamaCppBackend) -> str:
    held = backend.stats().held_prefixes
    return max(held, key=lambda link: held[link])


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _bytes(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def _text(out: ChatCompletion) -> str:
    return out.choices[0].message.content or ""


async def test_the_next_turn_answers_the_same_from_moved_kv(
    pair: tuple[LlamaCppBackend, LlamaCppBackend],
) -> None:
    home, away = pair
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me more"}]
    answer = _text(await home.chat(_chat(first)))
    assert home.stats().kv_fingerprint == away.stats().kv_fingerprint

    header, chunks = await home.export_kv(_deepest(home))
    state = await _bytes(chunks)
    assert len(state) == header.n_bytes and header.tokens and header.chain
    imported = await away.import_kv(header, _chunks([state[:1000], state[1000:]]))
    assert (imported.tokens, imported.bytes) == (len(header.tokens), header.n_bytes)
    assert set(away.stats().held_prefixes) == {link for link, _ in header.chain}

    second = [*first, {"role": "assistant", "content": answer}]
    second.append({"role": "user", "content": "And then?"})
    hits_before = away.stats().prefix_hit_tokens or 0
    at_home, moved = await home.chat(_chat(second)), await away.chat(_chat(second))
    assert _text(moved) == _text(at_home)
    cached = moved.usage.prompt_tokens_details
    home_cached = at_home.usage.prompt_tokens_details
    assert cached is not None and home_cached is not None
    assert cached.cached_tokens == home_cached.cached_tokens
    assert cached.cached_tokens >= len(header.tokens) // 2
    assert (away.stats().prefix_hit_tokens or 0) - hits_before == cached.cached_tokens


async def test_engines_computing_otherwise_refuse_the_state(
    pair: tuple[LlamaCppBackend, LlamaCppBackend], tiny_model: Path, tmp_path: Path
) -> None:
    home, _ = pair
    await home.chat(_chat([{"role": "user", "content": SYSTEM}]))
    header, chunks = await home.export_kv(_deepest(home))
    state = await _bytes(chunks)
    other_model = write_demo_model(tmp_path / "other.gguf", "tiny", seed=1)
    for model, setting, part in (
        (tiny_model, {"flash_attn": False}, "flash_attn: auto != off"),
        (tiny_model, {"parallel": 4}, "sequences: 2 != 4"),
        (other_model, {}, "model_sha256"),
    ):
        other = await _backend(model, **setting)
        try:
            with pytest.raises(ConflictError) as refused:
                await other.import_kv(header, _chunks([state]))
            assert refused.value.code == "kv_mismatch" and part in refused.value.message
            assert other.stats().held_prefixes == {}
        finally:
            await other.aclose()


async def test_a_cut_or_oversized_state_changes_nothing(
    pair: tuple[LlamaCppBackend, LlamaCppBackend],
) -> None:
    home, away = pair
    await home.chat(_chat([{"role": "user", "content": SYSTEM}]))
    link = _deepest(home)
    header, chunks = await home.export_kv(link)
    state = await _bytes(chunks)

    with pytest.raises(InvalidRequestError) as cut:
        await away.import_kv(header, _chunks([state[: len(state) // 2]]))
    assert cut.value.code == "kv_incomplete"
    with pytest.raises(RequestTooLargeError):
        await away.import_kv(header, _chunks([state, b"more"]))
    huge = header.model_copy(update={"n_bytes": away.engine.state_bound + 1})
    with pytest.raises(RequestTooLargeError) as large:
        await away.import_kv(huge, _chunks([]))
    assert large.value.status_code == 413
    assert away.stats().held_prefixes == {}
    assert _text(await away.chat(_chat([{"role": "user", "content": "hi"}])))
    # the source is untouched: the same state again
    again, chunks = await home.export_kv(link)
    assert again == header and await _bytes(chunks) == state


async def test_a_link_nobody_holds_or_only_a_running_sequence_holds(
    pair: tuple[LlamaCppBackend, LlamaCppBackend],
) -> None:
    home, _ = pair
    with pytest.raises(NotFoundError) as missing:
        await home.export_kv("nothing-holds-this")
    assert missing.value.code == "kv_not_found"
    stream = home.chat_stream(
        _chat([{"role": "user", "content": SYSTEM}], max_tokens=900, stream=True)
    )
    try:
        await anext(stream)  # admitted: its sequence holds the conversation's links
        with pytest.raises(ConflictError) as busy:
            await home.export_kv(_deepest(home))
        assert busy.value.code == "kv_busy" and busy.value.retry_after
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


async def test_the_wire_form_is_a_header_line_then_the_state() -> None:
    header = KvHeader.model_validate(
        {
            "fingerprint": {
                "model_sha256": "0" * 64,
                **dict.fromkeys(("n_layer", "n_embd", "n_head", "n_head_kv"), 2),
                "type_k": "f16",
                "type_v": "f16",
                "flash_attn": "auto",
                "sequences": 2,
                "state_version": 3,
                "engine": "test",
            },
            "tokens": [1, 2, 3],
            "chain": [["a", 2]],
            "n_bytes": 5,
        }
    )
    line = encode_header(header)
    read, rest = await split_header(_chunks([line[:7], line[7:] + b"ab", b"cde"]))
    assert read == header and await _bytes(rest) == b"abcde"
    with pytest.raises(InvalidRequestError):
        await split_header(_chunks([b"{not json}\n"]))
