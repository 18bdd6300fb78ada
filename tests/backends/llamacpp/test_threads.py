"""llama.cpp's CPU threads under the batched engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TASKS = Path("/proc/self/task")

# Counted in a process of its own: OpenMP pools of engines that earlier tests started and
# stopped in the test process may linger, or be reused, and blur the count.
_COUNT = """
import asyncio, os, sys, threading
import llama_cpp  # its import starts threads of its own (numpy's BLAS); counted before
from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.settings import LlamaCppSettings
from gateway.protocol import ChatCompletionRequest

def native_threads():
    # threads of this process that Python did not start (llama.cpp's OpenMP workers)
    return len(os.listdir("/proc/self/task")) - threading.active_count()

async def main():
    before = native_threads()
    settings = LlamaCppSettings.model_validate(
        {"name": "tiny", "backend": "llamacpp", "model": sys.argv[1], "n_ctx": 256,
         "parallel": 2, "threads": 2, "max_queue": 2}
    )
    backend = LlamaCppBackend(settings)
    await backend.start()
    try:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4}
        await backend.chat(ChatCompletionRequest.model_validate(body))
        print(native_threads() - before)
    finally:
        await backend.aclose()

asyncio.run(main())
"""


@pytest.mark.skipif(not TASKS.is_dir(), reason="counts threads through /proc")
def test_every_decode_shares_one_openmp_pool(tiny_model: Path) -> None:
    """A 2-thread engine adds one OpenMP worker: the warm-up and every step decode on the
    scheduler thread. A decode on another thread (the loading one) adds a second pool, and
    with more OpenMP threads than cores they sleep between decodes instead of spinning:
    about a third of the throughput lost on a quiet 2-core machine."""
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _COUNT, str(tiny_model)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "1", done.stdout
