"""What moving a session's KV cache to another worker saves against prefilling it there.

Two ``shunter worker`` processes serve the bench model (``demo:bench``: 12 layers, dim 768,
q8_0 weights, f16 KV) with the same settings, so their KV fingerprints match. For each
session length (``--tokens``), in one sitting:

1. a first turn of that many prompt tokens on worker ``a``;
2. its KV moved to ``b`` as a gateway moves it: ``a``'s export piped into ``b``'s import
   through the OpenAI-compatible deployments in front of them (bytes and seconds);
3. the next turn (the first turn, its answer, a new question) streamed three ways, timed
   to its first token: on ``b`` from the moved KV; on ``a`` (home, the control); and on
   ``b`` with another system prompt of the same length, which no sequence holds (a
   re-prefill of the whole conversation).

``move / re-prefill`` compares what a gateway pays to serve the turn elsewhere: the move
plus the moved TTFT, against the re-prefill TTFT.

    .venv/bin/python -m bench.kv_move [--tokens 4000,16000] [--quick]

``--rolling`` runs :mod:`bench.kv_rolling` instead: a rolling restart of two workers behind
a gateway, with the drain handoff against without.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from backends.openai import OpenAICompatBackend, OpenAICompatSettings
from gateway.models.demo import ensure_demo_model
from tests.conftest import free_port

KEY = "sk-kv-bench"
AUTH = {"authorization": f"Bearer {KEY}"}
QUESTION = "Now summarise what came before in one line."
SYSTEM, OTHER_SYSTEM = "You are a careful assistant.", "You are a precise assistant."


@contextmanager
def worker(model: Path, ctx: int, log: Path) -> Iterator[str]:
    """A worker on a free port, behind a master key; its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "gateway.cli", "worker", "--model", str(model)]
    command += ["--name", "w", "--parallel", "2", "--ctx", str(ctx), "--threads", "1"]
    command += ["--port", str(port)]
    env = {**os.environ, "SHUNTER_MASTER_KEY": KEY}
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while figures(base).get("kv_fingerprint") is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def figures(base: str) -> dict[str, Any]:
    try:
        answer = httpx.get(f"{base}/v1/worker/stats", headers=AUTH, timeout=2)
    except httpx.TransportError:
        return {}
    if answer.status_code != 200:
        return {}
    found: dict[str, Any] = answer.json()["deployments"]["w"]
    return found


def prompt_of(tokens: int, seed: str, chars_per_token: float) -> str:
    """Text of about ``tokens`` tokens, distinct per ``seed``."""
    words, size, i = [], 0, 0
    while size < tokens * chars_per_token:
        word = f"{seed}{i * 7919 % 10007}"
        words.append(word)
        size += len(word) + 1
        i += 1
    return " ".join(words)


def chat(base: str, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    body = {"model": "w", "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    answer = httpx.post(f"{base}/v1/chat/completions", json=body, headers=AUTH, timeout=600)
    answer.raise_for_status()
    out: dict[str, Any] = answer.json()
    return out


def ttft(base: str, messages: list[dict[str, str]]) -> tuple[float, str]:
    """Seconds to the first streamed token; the prompt tokens, how many from cache."""
    body = {"model": "w", "messages": messages, "max_tokens": 8, "temperature": 0}
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    started, first, usage = time.perf_counter(), None, ""
    with httpx.stream(
        "POST", f"{base}/v1/chat/completions", json=body, headers=AUTH, timeout=600
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {") and first is None:
                first = time.perf_counter() - started
            if '"usage":{' in line:
                counts = httpx.Response(200, content=line[6:]).json()["usage"]
                cached = (counts.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                usage = f"{counts['prompt_tokens']} prompt tokens, {cached} cached"
    assert first is not None
    return first, usage


def deployment(name: str, base: str) -> OpenAICompatBackend:
    settings = OpenAICompatSettings.model_validate(
        {
            "name": name,
            "backend": "openai",
            "base_url": f"{base}/v1",
            "model": "w",
            "api_key_env": "KV_BENCH_KEY",
            "worker_stats": True,
        }
    )
    return OpenAICompatBackend(settings)


async def move(source_url: str, target_url: str, link: str) -> tuple[int, float, float]:
    """``a``'s export piped into ``b``'s import: bytes, wall seconds, the import's seconds."""
    os.environ["KV_BENCH_KEY"] = KEY
    source, target = deployment("a", source_url), deployment("b", target_url)
    await source.start()
    await target.start()
    try:
        started = time.perf_counter()
        header, chunks = await source.export_kv(link)
        done = await target.import_kv(header, chunks)
        return done.bytes, time.perf_counter() - started, done.seconds
    finally:
        await source.aclose()
        await target.aclose()


def session(home: str, length: int, seed: str, ratio: float) -> list[dict[str, str]]:
    """A first turn of about ``length`` tokens on ``home``; the next turn's messages."""
    first = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": prompt_of(length, seed, ratio)},
    ]
    answer = chat(home, first, 16)
    text = answer["choices"][0]["message"]["content"] or ""
    print(f"  first turn on a: {answer['usage']['prompt_tokens']} prompt tokens")
    return [*first, {"role": "assistant", "content": text}, {"role": "user", "content": QUESTION}]


def deepest(base: str) -> str:
    held: dict[str, int] = figures(base)["held_prefixes"]
    return max(held, key=lambda link: held[link])


def one_size(a: str, b: str, length: int, ratio: float) -> None:
    print(f"session of ~{length} tokens")
    moved_turn = session(a, length, f"s{length}x", ratio)
    link = deepest(a)
    n_bytes, move_s, import_s = asyncio.run(move(a, b, link))
    moved_ttft, moved_usage = ttft(b, moved_turn)
    home_ttft, home_usage = ttft(a, moved_turn)
    fresh_turn = [{"role": "system", "content": OTHER_SYSTEM}, *moved_turn[1:]]
    prefill_ttft, prefill_usage = ttft(b, fresh_turn)
    mib = n_bytes / (1 << 20)
    print(f"  moved:      {mib:8.1f} MiB in {move_s:6.3f} s (import {import_s:.3f} s)")
    print(f"  TTFT home (a):            {home_ttft:7.3f} s  ({home_usage})")
    print(f"  TTFT b after the move:    {moved_ttft:7.3f} s  ({moved_usage})")
    print(f"  TTFT b re-prefill:        {prefill_ttft:7.3f} s  ({prefill_usage})")
    total = move_s + moved_ttft
    print(
        f"  move + TTFT / re-prefill: {total:.3f} / {prefill_ttft:.3f} = {total / prefill_ttft:.3f}"
    )


def calibrate(base: str) -> float:
    """Characters per token of :func:`prompt_of`'s text on this model (the chat
    template's own tokens left out: a message of one word gives them)."""
    text = prompt_of(1000, "c", 4.0)
    served = chat(base, [{"role": "user", "content": text}], 1)["usage"]["prompt_tokens"]
    empty = chat(base, [{"role": "user", "content": "c"}], 1)["usage"]["prompt_tokens"]
    return len(text) / max(served - empty, 1)


def main(lengths: list[int], model: Path | None) -> None:
    folder = Path(tempfile.mkdtemp(prefix="kv-move-bench-"))
    path = model or ensure_demo_model(Path(tempfile.gettempdir()) / "shunter-bench.gguf", "bench")
    ctx = max(lengths) * 5 // 4 + 1024  # the text comes out up to a tenth longer
    with ExitStack() as stack:
        a = stack.enter_context(worker(path, ctx, folder / "a.log"))
        b = stack.enter_context(worker(path, ctx, folder / "b.log"))
        ratio = calibrate(a)
        print(f"bench model {path.name}, ctx {ctx} per sequence, {ratio:.2f} chars/token")
        for length in lengths:
            one_size(a, b, length, ratio)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="4000,16000", help="session lengths, comma-separated")
    parser.add_argument("--quick", action="store_true", help="4000 tokens only")
    parser.add_argument("--model", type=Path, help="a GGUF (default: the generated bench model)")
    parser.add_argument(
        "--rolling", action="store_true", help="a rolling restart, handoff against none"
    )
    args = parser.parse_args()
    if args.rolling:
        from bench.kv_rolling import main as rolling

        rolling(args.quick)
        sys.exit(0)
    sizes = [4000] if args.quick else [int(t) for t in args.tokens.split(",")]
    main(sizes, args.model)
