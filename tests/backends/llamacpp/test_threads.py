"""llama.cpp's CPU threads under the batched engine."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.settings import LlamaCppSettings
from gateway.protocol import ChatCompletionRequest

TASKS = Path("/proc/self/task")


def _native_threads() -> int:
    """Threads of this process that Python did not start (llama.cpp's OpenMP workers)."""
    return len(os.listdir(TASKS)) - threading.active_count()


@pytest.mark.skipif(not TASKS.is_dir(), reason="counts threads through /proc")
async def test_every_decode_shares_one_openmp_pool(tiny_model: Path) -> None:
    """A 2-thread engine adds one OpenMP worker: the warm-up and every step decode on the
    scheduler thread. A decode on another thread (the loading one) adds a second pool, and
    with more OpenMP threads than cores they sleep between decodes instead of spinning:
    about a third of the throughput lost on a quiet 2-core machine."""
    before = _native_threads()
    settings = LlamaCppSettings.model_validate(
        {"name": "tiny", "backend": "llamacpp", "model": str(tiny_model), "n_ctx": 256}
        | {"parallel": 2, "threads": 2, "max_queue": 2}
    )
    backend = LlamaCppBackend(settings)
    await backend.start()
    try:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
        await backend.chat(ChatCompletionRequest.model_validate(body | {"max_tokens": 4}))
        assert _native_threads() - before == 1
    finally:
        await backend.aclose()
