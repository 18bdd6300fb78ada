"""The batched llama.cpp engine, driven in-process on the generated tiny model."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.sampling import Finished, GenerationJob, Sampling
from backends.llamacpp.settings import LlamaCppSettings
from gateway.errors import InvalidRequestError, ServiceUnavailableError
from gateway.protocol import ChatCompletion, ChatCompletionRequest
from gateway.protocol.prefix import prefix_chain

SYSTEM = (
    "You are a careful assistant for the Shunter test suite. Answer briefly, "
    "in plain words, and never mention the weather."
)
PROMPTS = [
    "Tell me about item 0",
    "What is a cat?",
    "Write a poem about the sea",
    "zzzz",
    "How do I bake bread at home?",
    "Explain TCP",
    "List three colors",
    "Tell me about item 7 please, in detail",
]


def _settings(model: Path, **overrides: Any) -> LlamaCppSettings:
    values: dict[str, Any] = {
        "name": "tiny",
        "backend": "llamacpp",
        "model": str(model),
        "n_ctx": 1024,
        "parallel": 8,
        "threads": 1,
        "max_queue": 8,
        **overrides,
    }
    return LlamaCppSettings.model_validate(values)


async def _backend(model: Path, **overrides: Any) -> LlamaCppBackend:
    backend = LlamaCppBackend(_settings(model, **overrides))
    await backend.start()
    return backend


@pytest.fixture(scope="module")
async def batched(tiny_model: Path) -> AsyncIterator[LlamaCppBackend]:
    """Eight sequences, no prefix reuse: isolates the effect of batching."""
    backend = await _backend(tiny_model, prefix_cache=False)
    yield backend
    await backend.aclose()


@pytest.fixture(scope="module")
async def cached(tiny_model: Path) -> AsyncIterator[LlamaCppBackend]:
    backend = await _backend(tiny_model)
    yield backend
    await backend.aclose()


def _chat(content: str, *, system: str | None = None, **kwargs: Any) -> ChatCompletionRequest:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": content})
    body = {"model": "tiny", "messages": messages, "max_tokens": 16, "temperature": 0, **kwargs}
    return ChatCompletionRequest.model_validate(body)


def _text(out: ChatCompletion) -> str:
    return out.choices[0].message.content or ""


async def _wait_idle(backend: LlamaCppBackend, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while backend.stats().slots_busy and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    assert backend.stats().slots_busy == 0


async def test_batched_outputs_equal_solo_outputs_at_temperature_zero(
    batched: LlamaCppBackend,
) -> None:
    solo = [_text(await batched.chat(_chat(p))) for p in PROMPTS]
    together = await asyncio.gather(*(batched.chat(_chat(p)) for p in PROMPTS))
    assert [_text(out) for out in together] == solo
    assert len(set(solo)) > 1
    # a long prompt is prefilled in chunks beside running decodes: same answer as alone
    long = _chat(" ".join(PROMPTS) * 3)
    alone = _text(await batched.chat(long))
    mixed = await asyncio.gather(batched.chat(long), *(batched.chat(_chat(p)) for p in PROMPTS))
    assert _text(mixed[0]) == alone
    assert [_text(out) for out in mixed[1:]] == solo


async def test_small_prefill_chunks_give_the_same_output(tiny_model: Path) -> None:
    backend = await _backend(tiny_model, n_batch=8, parallel=2, prefix_cache=False)
    try:
        request = _chat(" ".join(PROMPTS), system=SYSTEM)
        chunked = await backend.chat(request)
    finally:
        await backend.aclose()
    reference = await _backend(tiny_model, parallel=2, prefix_cache=False)
    try:
        assert _text(chunked) == _text(await reference.chat(request))
    finally:
        await reference.aclose()


async def test_prefix_reuse_matches_a_cold_run(
    cached: LlamaCppBackend, batched: LlamaCppBackend
) -> None:
    before = cached.stats().prefix_hit_tokens or 0
    await cached.chat(_chat("first question", system=SYSTEM))
    warm = await cached.chat(_chat("second question", system=SYSTEM))
    cold = await batched.chat(_chat("second question", system=SYSTEM))
    assert _text(warm) == _text(cold)
    assert warm.usage is not None and warm.usage.prompt_tokens_details is not None
    shared = warm.usage.prompt_tokens_details.cached_tokens
    assert shared > len(SYSTEM) // 2
    stats = cached.stats()
    assert (stats.prefix_hit_tokens or 0) >= before + shared
    assert stats.prefix_hit_rate is not None and 0 < stats.prefix_hit_rate < 1
    # the same prompt again: everything but the last token comes from the cache
    again = await cached.chat(_chat("second question", system=SYSTEM))
    assert _text(again) == _text(cold)
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1


async def test_prefix_copied_from_a_running_neighbour(
    tiny_model: Path, batched: LlamaCppBackend
) -> None:
    backend = await _backend(tiny_model, parallel=2)
    try:
        runner = asyncio.create_task(backend.chat(_chat("long one", system=SYSTEM, max_tokens=400)))
        while not backend.stats().kv_used:
            await asyncio.sleep(0.001)
        joined = await backend.chat(_chat("short one", system=SYSTEM))
        assert not runner.done()
        assert joined.usage is not None and joined.usage.prompt_tokens_details is not None
        assert joined.usage.prompt_tokens_details.cached_tokens > len(SYSTEM) // 2
        cold = await batched.chat(_chat("short one", system=SYSTEM))
        assert _text(joined) == _text(cold)
        long_cold = await batched.chat(_chat("long one", system=SYSTEM, max_tokens=400))
        assert _text(await runner) == _text(long_cold)
    finally:
        await backend.aclose()


async def test_cancelling_frees_the_sequence_within_one_step(cached: LlamaCppBackend) -> None:
    engine = cached.engine
    job = GenerationJob(cached.engine.model.tokenize(b"go on", add_bos=True, special=False), 900,
                        Sampling(temperature=0))  # fmt: skip
    events = engine.run(job)
    assert isinstance(await anext(events), str | Finished)
    assert cached.stats().slots_busy == 1
    assert (cached.stats().kv_used or 0) > 0
    steps = engine.scheduler.steps
    await events.aclose()
    await _wait_idle(cached)
    assert engine.scheduler.steps <= steps + 2
    stats = cached.stats()
    assert stats.kv_used == 0 and stats.in_flight == 0 and stats.queue_depth == 0


async def test_full_queue_answers_service_unavailable(tiny_model: Path) -> None:
    backend = await _backend(tiny_model, parallel=1, max_queue=1)
    try:
        long = _chat("keep going", max_tokens=900)
        running = asyncio.create_task(backend.chat(long))
        queued = asyncio.create_task(backend.chat(long))
        while backend.stats().in_flight < 2 or not backend.stats().slots_busy:
            await asyncio.sleep(0.001)
        assert backend.stats().queue_depth == 1
        with pytest.raises(ServiceUnavailableError) as info:
            await backend.chat(_chat("one more"))
        assert info.value.status_code == 503
        assert info.value.headers()["retry-after"]
        with pytest.raises(ServiceUnavailableError):
            await anext(backend.chat_stream(_chat("one more")))  # before the first chunk
        for task in (queued, running):
            task.cancel()
        await asyncio.gather(running, queued, return_exceptions=True)
        await _wait_idle(backend)
        assert backend.stats().in_flight == 0
        assert (await backend.chat(_chat("now", max_tokens=3))).usage is not None
    finally:
        await backend.aclose()


async def test_json_schema_output_is_valid_under_batching(cached: LlamaCppBackend) -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "enum": ["yes", "no"]},
            "n": {"type": "integer"},
        },
        "required": ["answer", "n"],
        "additionalProperties": False,
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    requests = [
        _chat(p, max_tokens=60, temperature=0.9, seed=i, response_format=response_format)
        for i, p in enumerate(PROMPTS)
    ]
    outs = await asyncio.gather(*(cached.chat(r) for r in requests))
    for out in outs:
        data = json.loads(_text(out))
        assert data["answer"] in ("yes", "no") and isinstance(data["n"], int)
        assert out.choices[0].finish_reason == "stop"


async def test_seeds_reproduce_whatever_runs_beside(cached: LlamaCppBackend) -> None:
    def request(seed: int) -> ChatCompletionRequest:
        return _chat("Say hello", max_tokens=24, temperature=1.0, top_p=0.9, seed=seed)

    alone = _text(await cached.chat(request(7)))
    neighbours = [cached.chat(_chat(p, temperature=1.0)) for p in PROMPTS[:5]]
    outs = await asyncio.gather(cached.chat(request(7)), cached.chat(request(8)), *neighbours)
    assert _text(outs[0]) == alone
    assert _text(outs[1]) != alone


async def test_extra_sampling_fields(cached: LlamaCppBackend) -> None:
    good: dict[str, Any] = {"top_k": 5, "min_p": 0.05, "repetition_penalty": 1.3}
    out = await cached.chat(_chat("Say hello", temperature=0.7, seed=3, **good))
    assert out.usage is not None and out.usage.completion_tokens > 0
    greedy = _text(await cached.chat(_chat("Say hello", max_tokens=40)))
    penalized = _text(await cached.chat(_chat("Say hello", max_tokens=40, repeat_penalty=2.0)))
    assert penalized != greedy
    bad: list[tuple[str, Any]] = [
        ("top_k", -3),
        ("min_p", 2),
        ("repetition_penalty", 0),
        ("top_k", "x"),
    ]
    for field, value in bad:
        extra: dict[str, Any] = {field: value}
        with pytest.raises(InvalidRequestError) as info:
            await cached.chat(_chat("x", **extra))
        assert info.value.param == field


async def test_stop_strings_cut_the_text_in_stream_and_whole(cached: LlamaCppBackend) -> None:
    text = _text(await cached.chat(_chat("Say hello", max_tokens=40)))
    stop = text[10:12]
    stopped = await cached.chat(_chat("Say hello", max_tokens=40, stop=[stop]))
    assert stopped.choices[0].finish_reason == "stop"
    assert _text(stopped) == text[: text.index(stop)]
    chunks = [c async for c in cached.chat_stream(_chat("Say hello", max_tokens=40, stop=stop))]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == _text(stopped)
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


async def test_live_figures(cached: LlamaCppBackend) -> None:
    stats = cached.stats()
    assert stats.slots_total == 8
    assert stats.kv_total == 8 * 1024
    assert stats.decode_tokens_per_s is not None and stats.decode_tokens_per_s > 0
    assert stats.prefill_tokens_per_s is not None and stats.prefill_tokens_per_s > 0
    assert cached.capabilities.context_length == 1024


def test_quantized_kv_needs_flash_attention(tiny_model: Path) -> None:
    with pytest.raises(ValueError, match="flash_attn"):
        _settings(tiny_model, kv_cache_type="q8_0", flash_attn=False)
    assert _settings(tiny_model, kv_cache_type="q8_0").flash_attn == "auto"


async def test_quantized_kv_cache_needs_a_fitting_head_size(tiny_model: Path) -> None:
    # q8_0 blocks are 32 wide; the tiny model's heads are 16 (the bench model's 64 work)
    backend = LlamaCppBackend(_settings(tiny_model, parallel=2, kv_cache_type="q8_0"))
    with pytest.raises(RuntimeError, match="divisible by 32"):
        await backend.start()
    await backend.aclose()


def test_placement_helpers() -> None:
    from backends.llamacpp.held import HeldChains
    from backends.llamacpp.placement import Placement, common_prefix, runs
    from backends.llamacpp.sampling import SamplerChain
    from backends.llamacpp.sequences import Seq, Ticket

    assert [common_prefix([1, 2, 3], b) for b in ([1, 2, 3], [1, 2], [1, 9], [], [4])] == [
        3,
        2,
        1,
        0,
        0,
    ]
    assert (runs({0, 1, 2}), runs({0, 2, 3}), runs(set())) == (1, 2, 0)
    # a round that fills every free sequence sends each prompt to its own cached prefix
    seqs = [Seq(i) for i in range(3)]
    for seq, prefix in zip(seqs, ([1, 1, 1], [2, 2, 2], [3, 3, 3]), strict=True):
        seq.tokens = prefix
    placement = Placement(seqs, None, HeldChains(3), prefix_cache=True, n_ctx_seq=64)
    tickets = [
        Ticket(GenerationJob(prompt, 4, Sampling()), SamplerChain(None), lambda _: None)
        for prompt in ([3, 3, 3, 9], [1, 1, 1, 9], [2, 2, 2, 9])
    ]
    matched = placement.match(list(tickets))
    assert [(t.job.prompt_tokens[0], s.id if s else None) for t, s in matched] == [
        (3, 2),
        (1, 0),
        (2, 1),
    ]


async def test_sequences_report_the_prefixes_they_hold_and_keep_conversations_apart(
    tiny_model: Path,
) -> None:
    """Each conversation keeps its own sequence (a new one takes an empty sequence, the
    shared system prompt copied over), and the engine reports every held prefix link."""
    backend = await _backend(tiny_model, parallel=2)
    try:
        first = _chat("first question", system=SYSTEM)
        await backend.chat(first)
        held = backend.stats().held_prefixes
        links = [link for link, _ in prefix_chain(first)]
        assert [link for link in links if link in held] == links
        assert 0 < held[links[0]] < held[links[-1]]
        second = _chat("second question", system=SYSTEM)
        out = await backend.chat(second)
        assert out.usage is not None and out.usage.prompt_tokens_details is not None
        assert out.usage.prompt_tokens_details.cached_tokens > len(SYSTEM) // 2
        held = backend.stats().held_prefixes
        both = links + [link for link, _ in prefix_chain(second)]
        assert all(link in held for link in both)
        follow_up = _chat("first question", system=SYSTEM).model_copy(
            update={"messages": [*first.messages, *_chat("and then?").messages]}
        )
        again = await backend.chat(follow_up)
        assert again.usage is not None and again.usage.prompt_tokens_details is not None
        assert again.usage.prompt_tokens_details.cached_tokens > held[links[0]]
        held = backend.stats().held_prefixes
        assert all(link in held for link, _ in prefix_chain(second))  # not evicted
        assert all(link in held for link, _ in prefix_chain(follow_up))
    finally:
        await backend.aclose()
