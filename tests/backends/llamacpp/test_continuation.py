"""A llama.cpp answer cut short and continued on another engine of the same model file, as a
resumed stream asks for it (the delivered text as a trailing assistant message to be
continued): with greedy decoding the two parts read exactly as one uninterrupted answer.

Real engines on the tiny generated GGUF. Its babble is the hard case: the tokens a random
model picks are seldom the ones its tokenizer would read back from the same text, so this
only holds because the continuation starts from the very tokens the first engine decoded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.settings import LlamaCppSettings
from gateway.dispatch.midstream.splice import Delivered, continuation
from gateway.protocol import ChatCompletionChunk, ChatCompletionRequest

MAX_TOKENS = 80
CUT_AFTER = 25  # text chunks the first engine delivers


def _backend(model: Path, name: str) -> LlamaCppBackend:
    settings = LlamaCppSettings.model_validate(
        {
            "name": name,
            "backend": "llamacpp",
            "model": str(model),
            "n_ctx": 1024,
            "parallel": 1,
            "threads": 1,
        }
    )
    return LlamaCppBackend(settings)


def _request() -> ChatCompletionRequest:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
    }
    return ChatCompletionRequest.model_validate(body)


async def _text(chunks: AsyncIterator[ChatCompletionChunk]) -> tuple[str, int]:
    """The answer's text and its completion tokens (from the closing usage)."""
    text, tokens = [], 0
    async for chunk in chunks:
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        text.extend(c.delta.content or "" for c in chunk.choices)
    return "".join(text), tokens


@pytest.mark.parametrize("how", ["engine_closed", "stream_closed"])
async def test_a_continuation_on_another_engine_reads_as_one_answer(
    tiny_model: Path, how: str
) -> None:
    first, second = _backend(tiny_model, "first"), _backend(tiny_model, "second")
    await first.start()
    await second.start()
    try:
        whole, count = await _text(second.chat_stream(_request()))
        assert count == MAX_TOKENS
        delivered = Delivered(id="c", created=1, model="tiny")
        stream = first.chat_stream(_request())
        async for chunk in stream:
            delivered.add(chunk.model_dump(mode="json", exclude_none=True))
            if delivered.tokens == CUT_AFTER:
                break
        if how == "engine_closed":
            await first.aclose()  # the engine goes down under its answer
        await stream.aclose()  # type: ignore[attr-defined]
        assert whole.startswith(delivered.text) and len(delivered.text) < len(whole)

        request = continuation(_request(), delivered, "prefill")
        assert isinstance(request, ChatCompletionRequest)
        rest, produced = await _text(second.chat_stream(request))
        assert delivered.text + rest == whole
        assert produced == MAX_TOKENS - CUT_AFTER
    finally:
        await first.aclose()
        await second.aclose()


async def test_without_noted_tokens_the_text_is_read_as_plain_text(tiny_model: Path) -> None:
    backend = _backend(tiny_model, "solo")
    await backend.start()
    try:
        said = "Once upon <|im_end|> a time"  # a control token's spelling, as text
        opening = ChatCompletionRequest.model_validate(
            {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
        )
        body = {
            **opening.model_dump(exclude_none=True),
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": said}],
            "max_tokens": 4,
            "stream": True,
            "stream_options": {"include_usage": True},
            "continue_final_message": True,
            "add_generation_prompt": False,
        }
        prompt_tokens = 0
        async for chunk in backend.chat_stream(ChatCompletionRequest.model_validate(body)):
            if chunk.usage is not None:
                prompt_tokens = chunk.usage.prompt_tokens
        model = backend.engine.model
        plain = model.tokenize(said.encode(), add_bos=False, special=False)
        assert len(plain) > len(model.tokenize(said.encode(), add_bos=False, special=True))
        # the messages before it with the assistant turn opened, then the text, left open
        assert prompt_tokens == await backend.count_tokens(opening) + len(plain)
    finally:
        await backend.aclose()
