"""The llama.cpp stall watchdog: its rule on fed timestamps, then a real stall.

A real stall needs a scheduler thread that makes no progress for longer than
``stall_timeout_s`` while it has work. One honest way: a single decode step that really takes
seconds (a ~16k-token prompt prefilled in one chunk, ``n_batch`` as large as the context) under
a deliberately tiny ``stall_timeout_s``. From outside, that is exactly what a wedged decode
looks like until it returns, which is why the default timeout sits far above any step's length.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.settings import LlamaCppSettings
from backends.llamacpp.watchdog import StallWatch, check_interval
from gateway.errors import ServiceUnavailableError
from gateway.protocol import CompletionRequest
from tests.conftest import Server, start_server, stop_server

N_CTX = 16640  # one chunk holds the whole long prompt
LONG_PROMPT = "ab " * 8000  # 16001 tokens on the tiny model: one decode step of seconds
STALL_S = 0.2  # far below that step, far above the tiny model's ordinary steps (< 1 ms)


# the rule ----------------------------------------------------------------------------------


def test_work_without_progress_for_the_timeout_is_a_stall() -> None:
    watch = StallWatch(10.0)
    assert watch.observe(now=100.0, progress_at=0.0, pending=False) is None  # idle: never
    assert watch.observe(now=100.0, progress_at=95.0, pending=True) is None  # within time
    assert watch.observe(now=105.1, progress_at=95.0, pending=True) is True  # stalled now
    assert watch.stalled
    assert watch.observe(now=200.0, progress_at=95.0, pending=True) is None  # still
    assert watch.observe(now=201.0, progress_at=200.5, pending=True) is False  # moving again
    assert watch.observe(now=300.0, progress_at=201.0, pending=True) is True
    assert watch.observe(now=301.0, progress_at=201.0, pending=False) is False  # drained
    assert not watch.stalled


def test_the_watchdog_looks_often_enough_and_cheaply() -> None:
    assert check_interval(60.0) == 1.0
    assert check_interval(0.2) == pytest.approx(0.05)
    assert check_interval(0.001) == 0.01


def test_the_setting_takes_durations_and_can_be_off(tiny_model: Path) -> None:
    assert _settings(tiny_model).stall_timeout_s == 60.0
    assert _settings(tiny_model, stall_timeout_s="250ms").stall_timeout_s == 0.25
    assert _settings(tiny_model, stall_timeout_s=None).stall_timeout_s is None
    with pytest.raises(ValueError):
        _settings(tiny_model, stall_timeout_s=0)


# a real stall, in process ------------------------------------------------------------------


def _settings(model: Path, **overrides: Any) -> LlamaCppSettings:
    values: dict[str, Any] = {
        "name": "tiny",
        "backend": "llamacpp",
        "model": str(model),
        "n_ctx": N_CTX,
        "n_batch": N_CTX,
        "parallel": 1,
        "threads": 1,
        **overrides,
    }
    return LlamaCppSettings.model_validate(values)


def _completion(prompt: str, max_tokens: int = 4) -> CompletionRequest:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    return CompletionRequest.model_validate(body)


async def _until(condition: Any, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def test_a_stalled_engine_fails_its_work_refuses_more_and_recovers(
    tiny_model: Path,
) -> None:
    backend = LlamaCppBackend(_settings(tiny_model, stall_timeout_s=STALL_S))
    await backend.start()
    try:
        assert backend.stats().stalled is False
        running = asyncio.create_task(backend.completion(_completion(LONG_PROMPT, 1)))
        await _until(lambda: backend.stats().slots_busy == 1)
        queued = asyncio.create_task(backend.completion(_completion("behind it")))
        await _until(lambda: backend.stats().stalled)
        for task in (running, queued):
            with pytest.raises(ServiceUnavailableError) as info:
                await task
            assert info.value.code == "engine_stalled" and info.value.status_code == 503
            assert info.value.headers()["retry-after"]
        assert backend.stats().in_flight == 0
        with pytest.raises(ServiceUnavailableError) as refused:
            await backend.completion(_completion("while it is stuck"))
        assert refused.value.code == "engine_stalled"
        # the step returns: the abandoned job leaves its sequence and the engine is ready
        await _until(lambda: not backend.stats().stalled and backend.stats().slots_busy == 0)
        out = await backend.completion(_completion("after", 3))
        assert out.usage is not None and out.usage.completion_tokens > 0
    finally:
        await backend.aclose()


async def test_closing_a_stalled_engine_does_not_wait_for_the_stuck_step(
    tiny_model: Path,
) -> None:
    backend = LlamaCppBackend(_settings(tiny_model, stall_timeout_s=STALL_S))
    await backend.start()
    model = backend.engine.model
    running = asyncio.create_task(backend.completion(_completion(LONG_PROMPT, 1)))
    await _until(lambda: backend.stats().slots_busy == 1)
    await backend.aclose()  # gives the step stall_timeout_s, then leaves it to the thread
    assert model.pointer is not None  # still in use by the step: freeing it would crash
    with pytest.raises(ServiceUnavailableError):
        await running
    await _until(lambda: model.pointer is None)  # freed by the thread once the step returned


# a real stall, through `shunter serve` -----------------------------------------------------


@pytest.fixture(scope="module")
def stalling_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("stall")
    config = folder / "shunter.yaml"
    config.write_text(
        f"""
deployments:
  - name: tiny-local
    backend: llamacpp
    model: {tiny_model}
    n_ctx: {N_CTX}
    n_batch: {N_CTX}
    threads: 1
    parallel: 2
    stall_timeout_s: {int(STALL_S * 1000)}ms
models:
  tiny:
    candidates: [tiny-local]
reliability:
  retries: 0
"""
    )
    server = start_server(config, folder / "server.log")
    yield server
    stop_server(server)


def test_readiness_reports_a_stall_and_the_recovery(stalling_server: Server) -> None:
    readiness = f"{stalling_server.base_url}/health/readiness"
    answers: list[httpx.Response] = []

    def long_request() -> None:
        body = {"model": "tiny", "prompt": LONG_PROMPT, "max_tokens": 1}
        with httpx.Client(timeout=120) as client:
            answers.append(client.post(f"{stalling_server.api}/completions", json=body))

    sender = threading.Thread(target=long_request)
    sender.start()
    try:
        stalled = _poll(readiness, lambda r: r.status_code == 503)
        body = stalled.json()
        assert body["status"] == "stalled"
        assert body["deployments"]["tiny-local"]["stalled"] is True
        recovered = _poll(readiness, lambda r: r.status_code == 200)
        assert recovered.json()["status"] == "ready"
        assert recovered.json()["deployments"]["tiny-local"]["stalled"] is False
    finally:
        sender.join(timeout=120)
    (answer,) = answers
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "engine_stalled"
    with OpenAI(base_url=stalling_server.api, api_key="sk-test", max_retries=0) as client:
        out = client.completions.create(model="tiny", prompt="after", max_tokens=3)
    assert out.usage is not None and out.usage.completion_tokens > 0


def _poll(url: str, wanted: Any, timeout_s: float = 120.0) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = httpx.get(url, timeout=10)
        if wanted(response):
            return response
        time.sleep(0.01)
    raise AssertionError(f"{url} never answered as wanted")
