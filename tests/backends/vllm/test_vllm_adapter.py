"""The vLLM adapter against a fake engine and serving layer (tests/backends/fake_vllm.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from backends.vllm.backend import VLLMBackend, VLLMSettings, VLLMUnavailableError, check_available
from backends.vllm.engine import StatsRecorder
from backends.vllm.startup import VLLMStartError, memory_advice, start_error
from backends.vllm.wire import DONE, clean_reply, sse_events
from gateway.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    NotFoundError,
    ServiceUnavailableError,
    UpstreamError,
)
from gateway.planner import Device
from gateway.protocol import ChatCompletionChunk, ChatCompletionRequest, CompletionRequest
from tests.backends.vllm.fake_vllm import (
    FakeAsyncLLM,
    FakeServing,
    FakeVLLM,
    IterationStats,
    PrefixCacheStats,
    PromptTokenStats,
    SchedulerStats,
)

VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None


def settings(**overrides: Any) -> VLLMSettings:
    fields: dict[str, Any] = {"name": "gpu-a", "backend": "vllm", "model": "org/tiny"}
    return VLLMSettings.model_validate({**fields, **overrides})


def chat(content: str = "hello there", **fields: Any) -> ChatCompletionRequest:
    messages = [{"role": "user", "content": content}]
    return ChatCompletionRequest.model_validate({"model": "tiny", "messages": messages, **fields})


async def started(fake: FakeVLLM, **overrides: Any) -> VLLMBackend:
    backend = VLLMBackend(settings(**overrides), engine_factory=fake.factory)
    await backend.start()
    return backend


def release(gate: asyncio.Semaphore, tokens: int) -> None:
    for _ in range(tokens):
        gate.release()


def parts(fake: FakeVLLM) -> tuple[FakeAsyncLLM, FakeServing]:
    assert fake.engine is not None and fake.serving is not None
    return fake.engine, fake.serving


# settings and packaging ---------------------------------------------------------------


def test_engine_kwargs_pass_vllm_names_and_omit_unset() -> None:
    s = settings(
        max_model_len=4096,
        kv_cache_dtype="fp8",
        speculative_config={"method": "ngram", "num_speculative_tokens": 3},
        lora_adapters=[{"name": "sql", "path": "/loras/sql"}],
        sleep_after_idle_s=300,
        extra_engine_args={"seed": 7},
    )
    kwargs = s.engine_kwargs()
    assert kwargs["model"] == "org/tiny" and kwargs["max_model_len"] == 4096
    assert kwargs["kv_cache_dtype"] == "fp8" and kwargs["seed"] == 7
    assert kwargs["enable_lora"] is True and kwargs["max_loras"] == 1
    assert kwargs["enable_sleep_mode"] is True
    assert "max_num_seqs" not in kwargs and "quantization" not in kwargs


@pytest.mark.parametrize(
    "overrides",
    [
        {"extra_engine_args": {"max_model_len": 5}},
        {"lora_adapters": [{"name": "a", "path": "x"}, {"name": "a", "path": "y"}]},
        {"gpu_memory_utilization": 1.5},
    ],
)
def test_invalid_settings_are_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        settings(**overrides)


def test_importing_the_backend_does_not_import_vllm() -> None:
    code = "import backends.vllm.backend, sys; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(VLLM_INSTALLED, reason="vLLM is installed here")
async def test_without_vllm_start_says_which_extra_to_install() -> None:
    problem = check_available()
    assert problem is not None and "shunter[vllm]" in problem
    with pytest.raises(VLLMUnavailableError, match=r"install shunter\[vllm\]"):
        await VLLMBackend(settings()).start()


# requests -------------------------------------------------------------------------------


async def test_chat_goes_through_the_serving_layer_and_back() -> None:
    fake = FakeVLLM()
    backend = await started(fake)
    reply = await backend.chat(chat(max_tokens=3, temperature=0.0, top_k=5))
    _, serving = parts(fake)
    body = serving.bodies[0]
    assert body["model"] == "org/tiny" and body["stream"] is False and body["top_k"] == 5
    assert "stream_options" not in body
    assert reply.model == "tiny"
    assert reply.choices[0].message.content == "alpha beta gamma "
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 3
    assert "kv_transfer_params" not in reply.model_dump()  # vLLM's nulls are dropped
    await backend.aclose()


async def test_capabilities_follow_the_settings() -> None:
    plain = VLLMBackend(settings(max_model_len=2048))
    assert plain.capabilities.context_length == 2048 and not plain.capabilities.tools
    assert VLLMBackend(settings(tool_call_parser="hermes")).capabilities.tools
    backend = await started(FakeVLLM(max_model_len=64))
    assert backend.capabilities.context_length == 64 and backend.capabilities.json_schema
    await backend.aclose()


async def test_a_lora_adapter_is_chosen_by_model_name() -> None:
    fake = FakeVLLM()
    backend = await started(fake, lora_adapters=[{"name": "tiny", "path": "/loras/tiny"}])
    await backend.chat(chat(max_tokens=1))
    assert parts(fake)[1].bodies[0]["model"] == "tiny"
    await backend.aclose()


async def test_stream_yields_deltas_as_the_engine_makes_them_and_ends_with_usage() -> None:
    fake = FakeVLLM(gate=asyncio.Semaphore(0))
    backend = await started(fake)
    stream = backend.chat_stream(chat(max_tokens=3))
    first = await anext(stream)
    assert first.choices[0].delta.role == "assistant"
    assert fake.gate is not None
    fake.gate.release()
    second = await asyncio.wait_for(anext(stream), 1)
    assert second.choices[0].delta.content == "alpha "
    assert backend.stats().in_flight == 1
    release(fake.gate, 2)
    rest = [chunk async for chunk in stream]
    assert rest[-2].choices[0].finish_reason == "length"
    usage = rest[-1]
    assert usage.choices == [] and usage.usage is not None
    assert usage.usage.completion_tokens == 3 and usage.model == "tiny"
    body = parts(fake)[1].bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert backend.stats().in_flight == 0
    await backend.aclose()


async def test_raw_stream_frames_carry_the_parsed_streams_chunks() -> None:
    fake = FakeVLLM()
    backend = await started(fake)
    parsed = [c async for c in backend.chat_stream(chat(max_tokens=3))]
    raw = backend.chat_stream_raw(chat(max_tokens=3))
    frames = [f async for f in raw]
    await backend.aclose()
    assert all(f.startswith(b"data: {") and f.endswith(b"\n\n") for f in frames)
    as_chunks = [ChatCompletionChunk.model_validate_json(f[6:]) for f in frames]
    assert len(as_chunks) == len(parsed) - 1  # the usage-only chunk is held back
    for mine, theirs in zip(as_chunks, parsed, strict=False):
        assert mine.model_dump(exclude={"id", "created"}) == theirs.model_dump(
            exclude={"id", "created"}
        )
    assert raw.usage is not None and raw.usage == parsed[-1].usage
    assert raw.usage_frame is not None and b'"choices":[]' in raw.usage_frame


async def test_completion_and_its_stream() -> None:
    fake = FakeVLLM()
    backend = await started(fake)
    request = CompletionRequest(model="tiny", prompt="once upon", max_tokens=2)
    whole = await backend.completion(request)
    assert whole.choices[0].text == "alpha beta " and whole.object == "text_completion"
    chunks = [c async for c in backend.completion_stream(request)]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "alpha beta "
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert parts(fake)[1].bodies[1]["request_id"] != parts(fake)[1].bodies[0]["request_id"]
    await backend.aclose()


# cancellation --------------------------------------------------------------------------


async def test_consumer_going_away_aborts_the_engine_request() -> None:
    fake = FakeVLLM(gate=asyncio.Semaphore(1))
    backend = await started(fake)
    stream = backend.chat_stream(chat(max_tokens=50))
    await anext(stream)  # role
    await anext(stream)  # first token
    await stream.aclose()  # the client disconnected
    engine, serving = parts(fake)
    assert engine.aborted == [f"chatcmpl-{serving.bodies[0]['request_id']}"]
    assert backend.stats().in_flight == 0
    await backend.aclose()


async def test_cancelling_a_whole_request_aborts_it() -> None:
    fake = FakeVLLM(gate=asyncio.Semaphore(0))
    backend = await started(fake)
    task = asyncio.create_task(backend.chat(chat(max_tokens=5)))
    while not parts(fake)[0].started:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    engine, serving = parts(fake)
    assert f"chatcmpl-{serving.bodies[0]['request_id']}" in engine.aborted
    assert backend.stats().in_flight == 0
    await backend.aclose()


# errors -------------------------------------------------------------------------------


async def test_context_length_error_is_mapped() -> None:
    backend = await started(FakeVLLM(max_model_len=3))
    with pytest.raises(ContextLengthExceededError) as caught:
        await backend.chat(chat("one two three four five"))
    assert caught.value.param == "messages" and "maximum context length" in caught.value.message
    with pytest.raises(ContextLengthExceededError) as caught:
        async for _ in backend.completion_stream(CompletionRequest(model="t", prompt="a b c d")):
            pass
    assert caught.value.param == "prompt"
    await backend.aclose()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            {"message": "bad top_k", "type": "BadRequestError", "code": 400, "param": "top_k"},
            InvalidRequestError,
        ),
        ({"message": "no such model", "type": "NotFoundError", "code": 404}, NotFoundError),
        ({"message": "busy", "type": "Service Unavailable", "code": 503}, ServiceUnavailableError),
        ({"message": "boom", "type": "InternalServerError", "code": 500}, UpstreamError),
    ],
)
async def test_vllm_error_responses_are_mapped_by_status(
    error: dict[str, Any], expected: type[Exception]
) -> None:
    fake = FakeVLLM()
    backend = await started(fake)
    parts(fake)[1].reply_override = {"error": error}
    with pytest.raises(expected) as caught:
        await backend.chat(chat())
    assert type(caught.value) is expected
    if error.get("param"):
        assert getattr(caught.value, "param", None) == error["param"]
    with pytest.raises(expected):
        await anext(backend.chat_stream(chat()))
    assert backend.stats().in_flight == 0
    await backend.aclose()


async def test_engine_death_mid_stream_is_service_unavailable() -> None:
    fake = FakeVLLM(engine_options={"die_after": 2})
    backend = await started(fake)
    received: list[ChatCompletionChunk] = []
    with pytest.raises(ServiceUnavailableError, match="engine died"):
        async for chunk in backend.chat_stream(chat(max_tokens=10)):
            received.append(chunk)
    assert [c.choices[0].delta.content for c in received[1:]] == ["alpha ", "beta "]
    with pytest.raises(ServiceUnavailableError):
        await backend.chat(chat())
    await backend.aclose()


async def test_an_engine_side_abort_is_not_a_normal_finish() -> None:
    backend = await started(FakeVLLM(engine_options={"abort_after": 1}))
    with pytest.raises(ServiceUnavailableError, match="aborted"):
        await backend.chat(chat(max_tokens=5))
    await backend.aclose()


# stats ---------------------------------------------------------------------------------


async def test_live_stats_come_from_the_stat_logger_hook() -> None:
    fake = FakeVLLM(
        gate=asyncio.Semaphore(0),
        engine_options={"waiting": 2, "cached_tokens": 1},
    )
    backend = await started(fake, max_num_seqs=16)
    idle = backend.stats()
    assert idle.in_flight == 0 and idle.slots_total == 16 and idle.kv_total == 1024
    stream = backend.chat_stream(chat("a b c d", max_tokens=3))
    await anext(stream)
    assert fake.gate is not None
    fake.gate.release()
    await anext(stream)
    live = backend.stats()
    assert live.in_flight == 1 and live.slots_busy == 1 and live.queue_depth == 2
    assert live.kv_used == 256 and live.kv_total == 1024  # 25% of 1024 tokens
    assert live.prefill_tokens_per_s is not None and live.prefill_tokens_per_s > 0
    assert live.prefix_hit_rate == 0.25 and live.prefix_hit_tokens == 1
    release(fake.gate, 2)
    _ = [c async for c in stream]
    done = backend.stats()
    assert done.in_flight == 0 and done.queue_depth == 0 and done.slots_busy == 0
    await backend.aclose()


def test_token_rates_cover_a_sliding_window() -> None:
    now = [100.0]
    recorder = StatsRecorder(clock=lambda: now[0])
    for _ in range(5):
        recorder.record(SchedulerStats(), IterationStats(10, PromptTokenStats(computed=40)))
        now[0] += 1.0
    stats = recorder.snapshot(in_flight=1, slots_total=None, kv_tokens=None)
    assert stats.decode_tokens_per_s == pytest.approx(10.0)
    assert stats.prefill_tokens_per_s == pytest.approx(40.0)
    assert stats.kv_used is None and stats.kv_total is None
    now[0] += 30.0
    later = recorder.snapshot(in_flight=0, slots_total=None, kv_tokens=None)
    assert later.decode_tokens_per_s == 0.0 and later.prefill_tokens_per_s == 0.0
    recorder.record(SchedulerStats(prefix_cache_stats=PrefixCacheStats(reset=True)), None)
    assert recorder.snapshot(in_flight=0, slots_total=None, kv_tokens=None).prefix_hit_rate is None


# lifecycle -----------------------------------------------------------------------------


async def test_aclose_drains_in_flight_requests_then_shuts_down() -> None:
    fake = FakeVLLM(gate=asyncio.Semaphore(0))
    backend = await started(fake)
    stream = backend.chat_stream(chat(max_tokens=2))
    await anext(stream)
    closing = asyncio.create_task(backend.aclose())
    await asyncio.sleep(0.01)
    assert not closing.done()
    with pytest.raises(ServiceUnavailableError, match="shutting down"):
        await backend.chat(chat())
    assert fake.gate is not None
    release(fake.gate, 2)
    assert len([c async for c in stream]) == 3  # two tokens (the last with finish), usage
    await asyncio.wait_for(closing, 1)
    engine, _ = parts(fake)
    assert engine.is_shut_down and engine.aborted == []


async def test_aclose_aborts_what_is_left_after_the_drain_timeout() -> None:
    fake = FakeVLLM(gate=asyncio.Semaphore(1))
    backend = await started(fake, drain_timeout_s=0.02)
    stream = backend.chat_stream(chat(max_tokens=5))
    await anext(stream)
    await anext(stream)  # generating
    await backend.aclose()
    engine, serving = parts(fake)
    assert engine.is_shut_down
    assert engine.aborted == [f"chatcmpl-{serving.bodies[0]['request_id']}"]
    assert fake.gate is not None
    release(fake.gate, 5)  # the engine answers the abort: the stream ends with an error
    with pytest.raises(ServiceUnavailableError):
        async for _ in stream:
            pass


async def test_idle_engine_sleeps_and_wakes_for_the_next_request() -> None:
    fake = FakeVLLM()
    backend = await started(fake, sleep_after_idle_s=0.02)
    await backend.chat(chat(max_tokens=1))
    await until(lambda: backend.sleeping)
    engine, _ = parts(fake)
    assert backend.sleeping and engine.calls == ["sleep"]
    reply = await backend.chat(chat(max_tokens=1))  # the fake refuses to generate asleep
    assert reply.choices[0].message.content == "alpha "
    assert engine.calls[:2] == ["sleep", "wake_up"]
    await backend.aclose()


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in 2 s")


async def test_an_engine_that_cannot_sleep_keeps_serving() -> None:
    fake = FakeVLLM(engine_options={"sleep_error": RuntimeError("sleep mode is CUDA-only")})
    backend = await started(fake, sleep_after_idle_s=0.01)
    await until(lambda: backend._sleeper_task is not None and backend._sleeper_task.done())
    assert not backend.sleeping
    assert (await backend.chat(chat(max_tokens=1))).choices[0].message.content == "alpha "
    await backend.aclose()


async def test_a_failed_wake_up_is_service_unavailable() -> None:
    fake = FakeVLLM(engine_options={"wake_error": RuntimeError("CUDA error")})
    backend = await started(fake, sleep_after_idle_s=0.01)
    await until(lambda: backend.sleeping)
    with pytest.raises(ServiceUnavailableError, match="could not wake"):
        await backend.chat(chat(max_tokens=1))
    assert backend.stats().in_flight == 0
    await backend.aclose()


# startup failures ----------------------------------------------------------------------

LLAMA_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
H100 = Device.declared("cuda:0 H100", "cuda", 80)
NO_KV = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
    "when initializing the engine."
)


def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    return tmp_path


def test_memory_advice_counts_weights_kv_and_overhead() -> None:
    advice = memory_advice(settings(max_model_len=8192), LLAMA_8B, H100)
    assert advice.weights_bytes == 8_030_261_248 * 2  # the published parameter count, bf16
    assert advice.kv_bytes == 32 * 8 * 128 * 2 * 2 * 8192  # layers x kv heads x dim x K,V x 2 B
    assert 0.2 < advice.needed_utilization < 0.25
    assert advice.suggested_utilization() == pytest.approx(0.25)


async def test_too_little_memory_at_start_is_reported_with_a_suggestion(tmp_path: Path) -> None:
    async def failing(s: VLLMSettings, recorder: StatsRecorder) -> Any:
        raise ValueError(NO_KV)

    config = settings(
        model=str(model_dir(tmp_path)), gpu_memory_utilization=0.15, max_model_len=8192
    )
    backend = VLLMBackend(config, engine_factory=failing, device=H100)
    with pytest.raises(VLLMStartError) as caught:
        await backend.start()
    message = str(caught.value)
    assert "gpu_memory_utilization 0.15 leaves no room for the KV cache" in message
    assert "weights 14.96 GiB" in message and "suggested gpu_memory_utilization: 0.25" in message


def test_asking_for_more_than_is_free_suggests_a_lower_share(tmp_path: Path) -> None:
    config = settings(model=str(model_dir(tmp_path)), max_model_len=8192)
    exc = ValueError(
        "Free memory on device cuda:0 (40.0/80.0 GiB) on startup is less than desired GPU "
        "memory utilization (0.92, 73.6 GiB). Decrease GPU memory utilization."
    )
    message = str(start_error(config, exc, H100))
    assert "more than the free 0.50" in message
    assert "suggested gpu_memory_utilization: 0.25" in message


def test_an_opaque_engine_failure_points_at_the_log_and_the_estimate(tmp_path: Path) -> None:
    config = settings(model=str(model_dir(tmp_path)), gpu_memory_utilization=0.1)
    exc = RuntimeError("Engine core initialization failed. See root cause above.")
    message = str(start_error(config, exc, H100))
    assert "vLLM's log above" in message and "likely memory" in message
    assert "suggested gpu_memory_utilization" in message
    other = str(start_error(settings(), RuntimeError("no CUDA"), H100))
    assert other == "deployment 'gpu-a': vLLM failed to start: no CUDA"


# wire ----------------------------------------------------------------------------------


def test_sse_frames_and_replies_are_cleaned() -> None:
    frames = list(sse_events('data: {"a": 1}\n\ndata: [DONE]\n\n'))
    assert frames == [{"a": 1}, DONE]
    data = {
        "model": "org/tiny",
        "choices": [{"index": 0, "finish_reason": "repetition", "delta": {"content": None}}],
        "usage": None,
    }
    assert clean_reply(data, "tiny") == {
        "model": "tiny",
        "choices": [{"index": 0, "finish_reason": "stop", "delta": {}}],
    }


async def aiter_frames(frames: list[str]) -> AsyncIterator[str]:
    for frame in frames:
        yield frame


async def test_a_stream_without_usage_is_an_upstream_error() -> None:
    fake = FakeVLLM()
    backend = await started(fake)
    head = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "org/tiny"}
    chunk = {**head, "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    frames = [f"data: {json.dumps(chunk)}\n\n", "data: [DONE]\n\n"]
    parts(fake)[1].reply_override = aiter_frames(frames)
    with pytest.raises(UpstreamError, match="without its usage chunk"):
        async for _ in backend.chat_stream(chat()):
            pass
    await backend.aclose()
