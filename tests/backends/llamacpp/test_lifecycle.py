"""Jobs the llama.cpp engine cannot place, and jobs whose consumer goes away, on the tiny model.

Every job here must leave the engine idle again: no busy sequence, nothing queued, nothing in
flight, and a scheduler thread that sleeps (its step count stays put).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from backends.base import Backend
from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.batch import Scheduler
from backends.llamacpp.jobs import start_of_text
from backends.llamacpp.sampling import Finished, GenerationJob, Sampling
from backends.llamacpp.settings import LlamaCppSettings
from gateway.errors import ContextLengthExceededError, InvalidRequestError
from gateway.protocol import CompletionRequest
from gateway.residency.resident import Residency
from tests.conftest import Server

LONG = 900  # tokens: a job that is still running when the test acts on it


def _settings(model: Path, **overrides: Any) -> LlamaCppSettings:
    values: dict[str, Any] = {
        "name": "tiny",
        "backend": "llamacpp",
        "model": str(model),
        "n_ctx": 1024,
        "parallel": 2,
        "threads": 1,
        "max_queue": 4,
        **overrides,
    }
    return LlamaCppSettings.model_validate(values)


@pytest.fixture(scope="module")
async def backend(tiny_model: Path) -> AsyncIterator[LlamaCppBackend]:
    backend = LlamaCppBackend(_settings(tiny_model))
    await backend.start()
    yield backend
    await backend.aclose()


def _completion(prompt: str | list[str], **kwargs: Any) -> CompletionRequest:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0, **kwargs}
    return CompletionRequest.model_validate(body)


def _job(prompt: list[int], max_tokens: int = 8) -> GenerationJob:
    return GenerationJob(prompt, max_tokens, Sampling(temperature=0))


async def _until(condition: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def _assert_idle(backend: Backend, scheduler: Scheduler) -> None:
    """Back to idle figures, and the thread asleep: no more steps for anyone."""

    def idle() -> bool:
        stats = backend.stats()
        return (stats.slots_busy, stats.queue_depth, stats.in_flight, stats.kv_used) == (
            0,
            0,
            0,
            0,
        )

    await _until(idle)
    await asyncio.sleep(0.05)  # the thread's last bookkeeping after the figures settle
    steps = scheduler.steps
    await asyncio.sleep(0.2)  # a spinning thread would step hundreds of times meanwhile
    assert scheduler.steps == steps
    assert backend.stats().slots_busy == 0


# empty and unplaceable prompts -------------------------------------------------------------


async def test_an_empty_prompt_is_generated_from_bos(backend: LlamaCppBackend) -> None:
    for prompt in ("", [""]):
        # two at once: each used to wedge one of the two sequences for good
        outs = await asyncio.wait_for(
            asyncio.gather(*(backend.completion(_completion(prompt)) for _ in range(2))), 60
        )
        for out in outs:
            assert out.usage is not None and out.usage.prompt_tokens == 1
            assert out.usage.completion_tokens > 0 and out.choices[0].text
        chunks = [c async for c in backend.completion_stream(_completion(prompt))]
        assert "".join(c.choices[0].text for c in chunks if c.choices) == outs[0].choices[0].text
    await _assert_idle(backend, backend.engine.scheduler)
    later = await backend.completion(_completion("and then", max_tokens=3))
    assert later.usage is not None and later.usage.completion_tokens > 0


def test_empty_prompts_through_the_api(server: Server) -> None:
    with OpenAI(base_url=server.api, api_key="sk-test", max_retries=0, timeout=60) as client:
        for prompt in ("", [""], "", [""]):  # twice the deployment's two sequences
            out = client.completions.create(model="tiny", prompt=prompt, max_tokens=4)
            assert out.usage is not None and out.usage.prompt_tokens == 1
            assert out.choices[0].text
        chunks = client.completions.create(model="tiny", prompt="", max_tokens=4, stream=True)
        assert "".join(c.choices[0].text for c in chunks if c.choices)
        later = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=4
        )
        assert later.choices[0].message.content
    deadline = time.monotonic() + 30
    while True:
        ready = httpx.get(f"{server.base_url}/health/readiness", timeout=10)
        figures = ready.json()["deployments"]["tiny-local"]
        if ready.status_code == 200 and figures["slots_busy"] == figures["in_flight"] == 0:
            break
        assert time.monotonic() < deadline, ready.text
        time.sleep(0.01)


def test_a_model_without_bos_refuses_an_empty_prompt() -> None:
    assert start_of_text(7, "prompt") == [7]
    with pytest.raises(InvalidRequestError) as info:
        start_of_text(-1, "prompt")
    assert info.value.status_code == 400 and info.value.param == "prompt"


async def test_the_scheduler_fails_only_the_job_it_cannot_place(backend: LlamaCppBackend) -> None:
    engine = backend.engine
    n_vocab, n_ctx = engine.model.n_vocab, engine.n_ctx_per_slot
    good = engine.model.tokenize(b"a neighbour", add_bos=True, special=False)
    reference = [e async for e in engine.run(_job(good, 40))]
    neighbour = engine.run(_job(good, 40))
    first = await anext(neighbour)  # running while the bad ones arrive
    bad: list[tuple[list[int], type[Exception]]] = [
        ([], InvalidRequestError),
        ([n_vocab + 3], InvalidRequestError),
        ([-5, 1], InvalidRequestError),
        ([1] * n_ctx, ContextLengthExceededError),
    ]
    for prompt, error in bad:
        with pytest.raises(error):
            async with asyncio.timeout(60):
                async for _ in engine.run(_job(prompt)):
                    pass
    # a max_tokens past the sequence's room ends at the room, not in a failed decode
    events = [e async for e in engine.run(_job([1] * (n_ctx - 3), 50))]
    assert isinstance(events[-1], Finished) and events[-1].reason == "length"
    assert events[-1].completion_tokens == 4  # 3 decoded into the room, 1 sampled last
    rest = [e async for e in neighbour]
    assert [first, *rest[:-1]] == reference[:-1]  # the same text as when it ran alone
    assert isinstance(rest[-1], Finished) and rest[-1].reason == "length"
    await _assert_idle(backend, engine.scheduler)


# consumers that go away ---------------------------------------------------------------------


async def test_a_cancelled_queued_request_leaves_the_queue(tiny_model: Path) -> None:
    backend = LlamaCppBackend(_settings(tiny_model, parallel=1))
    await backend.start()
    try:
        running = asyncio.create_task(backend.completion(_completion("hold", max_tokens=LONG)))
        await _until(lambda: backend.stats().slots_busy == 1)
        queued = asyncio.create_task(backend.completion(_completion("wait")))
        await _until(lambda: backend.stats().queue_depth == 1)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        stats = backend.stats()  # withdrawn as the task ended, not at some later step
        assert (stats.queue_depth, stats.in_flight, stats.slots_busy) == (0, 1, 1)
        assert not running.done()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        await _assert_idle(backend, backend.engine.scheduler)
        assert (await backend.completion(_completion("again", max_tokens=2))).usage is not None
    finally:
        await backend.aclose()


async def test_a_cancelled_running_request_frees_its_sequence(backend: LlamaCppBackend) -> None:
    scheduler = backend.engine.scheduler
    task = asyncio.create_task(backend.completion(_completion("go on", max_tokens=LONG)))
    await _until(lambda: (backend.stats().kv_used or 0) > 8)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    steps = scheduler.steps  # the job is marked cancelled by now
    assert backend.stats().in_flight == 0
    await _until(lambda: backend.stats().slots_busy == 0)
    assert scheduler.steps <= steps + 2  # the step under way, then it leaves its sequence
    await _assert_idle(backend, scheduler)


async def test_a_closed_stream_frees_its_sequence(backend: LlamaCppBackend) -> None:
    scheduler = backend.engine.scheduler
    stream = backend.completion_stream(_completion("stream on", max_tokens=LONG))
    assert isinstance(stream, AsyncIterator)
    await anext(stream)
    assert backend.stats().slots_busy == 1
    await stream.aclose()  # type: ignore[attr-defined]
    assert backend.stats().in_flight == 0
    await _assert_idle(backend, scheduler)


async def test_the_resident_wrapper_frees_the_engine_too(tiny_model: Path) -> None:
    """Every llama.cpp deployment is served through a ResidentBackend: the same holds there."""
    residency = Residency()
    resident = residency.create(_settings(tiny_model))
    await resident.start()
    try:
        inner = resident._backend  # type: ignore[attr-defined]
        assert isinstance(inner, LlamaCppBackend)
        scheduler = inner.engine.scheduler
        task = asyncio.create_task(resident.completion(_completion("x", max_tokens=LONG)))
        await _until(lambda: (resident.stats().kv_used or 0) > 8)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stream = resident.completion_stream(_completion("y", max_tokens=LONG))
        await anext(stream)
        assert resident.stats().in_flight == 1
        await stream.aclose()  # type: ignore[attr-defined]
        await _assert_idle(resident, scheduler)
    finally:
        await resident.aclose()
