"""Exact response cache: canonical keys, opt-in rules, storage, and stream replay."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.admission.cache import (
    CacheRule,
    ResponseCache,
    chat_chunks,
    completion_chunks,
    replay,
    request_digest,
)
from gateway.protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    Completion,
    CompletionChoice,
    CompletionRequest,
    ToolCall,
    Usage,
)
from gateway.state import StateStore

MESSAGES = [{"role": "user", "content": "hi"}]
OWNER = "key_a"


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "tiny", "messages": MESSAGES, "temperature": 0, **fields}
    )


def answer(content: str | None = "hello there", **fields: Any) -> ChatCompletion:
    return ChatCompletion(
        model="tiny",
        choices=[Choice(message=AssistantMessage(content=content, **fields))],
        usage=Usage.of(5, 2),
    )


def test_the_key_ignores_stream_options_user_and_field_order() -> None:
    base = request_digest(chat(), OWNER)
    assert request_digest(chat(stream=True, stream_options={"include_usage": True}), OWNER) == base
    assert request_digest(chat(user="alice"), OWNER) == base
    assert request_digest(chat(max_tokens=None), OWNER) == base
    reordered = ChatCompletionRequest.model_validate(
        {"temperature": 0, "messages": MESSAGES, "model": "tiny"}
    )
    assert request_digest(reordered, OWNER) == base


def test_the_key_changes_with_anything_that_changes_the_answer() -> None:
    base = request_digest(chat(), OWNER)
    assert request_digest(chat(max_tokens=5), OWNER) != base
    assert request_digest(chat(seed=1), OWNER) != base
    assert request_digest(chat(some_vendor_extra=True), OWNER) != base
    other_model = ChatCompletionRequest.model_validate(
        {"model": "big", "messages": MESSAGES, "temperature": 0}
    )
    assert request_digest(other_model, OWNER) != base
    text = CompletionRequest.model_validate({"model": "tiny", "prompt": "hi", "temperature": 0})
    assert request_digest(text, OWNER) != base


def test_the_key_belongs_to_one_api_key() -> None:
    # one tenant's cached answer (and the prompt it reveals) never serves another key
    assert request_digest(chat(), "key_a") != request_digest(chat(), "key_b")
    assert request_digest(chat(), "key_a") == request_digest(chat(), "key_a")


async def test_a_hit_is_only_for_the_key_that_stored_it(store: StateStore) -> None:
    cache = ResponseCache(store, {"tiny": CacheRule(ttl_s=60)})
    mine, theirs = cache.key(chat(), "key_a"), cache.key(chat(), "key_b")
    assert mine is not None and theirs is not None
    await cache.put(mine, answer())
    assert await cache.get(mine, ChatCompletion) is not None
    assert await cache.get(theirs, ChatCompletion) is None


def test_caching_is_opt_in_per_model_and_temperature_zero_by_default(store: StateStore) -> None:
    cache = ResponseCache(store, {"tiny": CacheRule(ttl_s=60)})
    key = cache.key(chat(), OWNER)
    assert key is not None and key.ttl_s == 60
    assert cache.key(chat(temperature=0.7), OWNER) is None
    assert cache.key(chat(temperature=None), OWNER) is None  # the model's default is not 0
    other = ChatCompletionRequest.model_validate(
        {"model": "big", "messages": MESSAGES, "temperature": 0}
    )
    assert cache.key(other, OWNER) is None
    relaxed = ResponseCache(store, {"tiny": CacheRule(any_temperature=True)})
    assert relaxed.key(chat(temperature=0.7), OWNER) is not None


async def test_a_stored_response_comes_back_with_a_fresh_id(store: StateStore) -> None:
    cache = ResponseCache(store, {"tiny": CacheRule(ttl_s=60)})
    key = cache.key(chat(), OWNER)
    assert key is not None
    assert await cache.get(key, ChatCompletion) is None
    original = answer()
    await cache.put(key, original)
    streamed_key = cache.key(chat(stream=True), OWNER)
    assert streamed_key == key
    hit = await cache.get(key, ChatCompletion)
    assert hit is not None
    assert hit.choices == original.choices and hit.usage == original.usage
    assert hit.id != original.id and hit.id.startswith("chatcmpl-")
    assert (cache.stats.hits, cache.stats.misses, cache.stats.stores) == (1, 1, 1)


async def test_entries_expire_after_their_ttl(store: StateStore) -> None:
    cache = ResponseCache(store, {"tiny": CacheRule(ttl_s=0.1)})
    key = cache.key(chat(), OWNER)
    assert key is not None
    await cache.put(key, answer())
    await asyncio.sleep(0.2)
    assert await cache.get(key, ChatCompletion) is None


async def test_too_large_responses_are_not_stored(store: StateStore) -> None:
    cache = ResponseCache(store, {"tiny": CacheRule()}, max_bytes=100)
    key = cache.key(chat(), OWNER)
    assert key is not None
    await cache.put(key, answer("x" * 200))
    assert await cache.get(key, ChatCompletion) is None


async def test_a_chat_response_replays_as_openai_stream_chunks() -> None:
    response = answer()
    chunks = [c async for c in replay(chat_chunks(response))]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hello there"
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish == [None, None, "stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage == response.usage
    assert {c.id for c in chunks} == {response.id}
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.usage is None for c in chunks[:-1])
    first = chunks[0].model_dump(mode="json")
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_tool_calls_replay_as_deltas() -> None:
    call = ToolCall.model_validate(
        {"id": "call_1", "function": {"name": "f", "arguments": '{"x": 1}'}}
    )
    response = answer(content=None, tool_calls=[call])
    response.choices[0].finish_reason = "tool_calls"
    chunks = chat_chunks(response)
    calls = [
        c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls
    ]
    assert len(calls) == 1 and calls[0] is not None
    assert calls[0][0].function == {"name": "f", "arguments": '{"x": 1}'}
    assert chunks[-2].choices[0].finish_reason == "tool_calls"


def test_a_text_completion_replays_as_chunks() -> None:
    response = Completion(
        model="tiny",
        choices=[CompletionChoice(text="abc", finish_reason="length")],
        usage=Usage.of(1, 3),
    )
    chunks = completion_chunks(response)
    assert [c.choices[0].text for c in chunks[:-1]] == ["abc", ""]
    assert [c.choices[0].finish_reason for c in chunks[:-1]] == [None, "length"]
    assert chunks[-1].choices == [] and chunks[-1].usage == response.usage
