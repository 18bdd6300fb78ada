"""CPU per streamed chunk on the in-process vLLM path, the two ways a chat stream can be
framed: chunks validated into models and re-serialised (``Framed(chat_stream)``), or written
from the engine layer's dicts (``chat_stream_raw``, what the gateway uses).

The engine is the CPU-only fake from the tests (one token per step), so this measures the
gateway's own per-chunk work, not a GPU: the absolute figures include the fake's cost, the
difference between the two columns is what the framing costs. Needs no vLLM install.

    .venv/bin/python -m bench.vllm_stream_frames [--streams 64] [--tokens 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from backends.vllm.backend import VLLMBackend, VLLMSettings
from gateway.protocol import ChatCompletionRequest
from gateway.protocol.frames import Framed
from tests.backends.vllm.fake_vllm import FakeVLLM


async def drain(frames: AsyncIterator[bytes]) -> int:
    count = 0
    async for _ in frames:
        count += 1
    return count


async def one_round(backend: VLLMBackend, streams: int, tokens: int, raw: bool) -> float:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    request = ChatCompletionRequest.model_validate({**body, "max_tokens": tokens, "stream": True})

    def frames() -> Any:
        if raw:
            return backend.chat_stream_raw(request)
        return Framed(backend.chat_stream(request))

    started = time.process_time()
    counts = await asyncio.gather(*(drain(frames()) for _ in range(streams)))
    spent = time.process_time() - started
    return spent / sum(counts) * 1e6


async def main(streams: int, tokens: int, rounds: int) -> None:
    fake = FakeVLLM(max_model_len=tokens + 64)
    settings = VLLMSettings.model_validate(
        {"name": "gpu-a", "backend": "vllm", "model": "org/tiny", "max_num_seqs": streams}
    )
    backend = VLLMBackend(settings, engine_factory=fake.factory)
    await backend.start()
    await one_round(backend, 4, 8, raw=True)  # warm-up
    parsed, raw = [], []
    for _ in range(rounds):  # interleaved, so drift on a shared machine hits both
        parsed.append(await one_round(backend, streams, tokens, raw=False))
        raw.append(await one_round(backend, streams, tokens, raw=True))
    await backend.aclose()
    p, r = sorted(parsed)[len(parsed) // 2], sorted(raw)[len(raw) // 2]
    print(f"{streams} concurrent streams x {tokens} tokens, {rounds} rounds, median CPU per frame")
    print(f"  validated + re-serialised : {p:7.1f} us")
    print(f"  raw (json.dumps of dicts) : {r:7.1f} us")
    print(f"  saved per frame           : {p - r:7.1f} us ({p / r:.2f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.streams, args.tokens, args.rounds))
