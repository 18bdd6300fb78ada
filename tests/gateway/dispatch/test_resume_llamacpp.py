"""A llama.cpp engine killed mid-answer, its answer finished by another: a real `shunter
serve` gateway in front of two `shunter serve` workers, each running the tiny generated
GGUF in its own llama.cpp engine. The first worker's process is killed while it streams;
the second continues from the delivered text (appended to the rendered prompt, the
assistant turn left open), and the client reads one stream: what the first delivered, then
exactly what the second writes (greedy) when asked to continue that. (Across processes the
continuation starts from the text's tokens; within one process from the first engine's own
tokens, which tests/backends/llamacpp/test_continuation.py checks against one uninterrupted
answer.)"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server

HELLO = [{"role": "user", "content": "Tell me a long story."}]
MAX_TOKENS = 1000  # long enough that the first engine is still generating when it dies


@dataclass(frozen=True)
class Setup:
    gateway: Server
    first: Server
    second: Server


def worker(model: Path, folder: Path, name: str) -> Server:
    config = folder / f"{name}.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: engine, backend: llamacpp, model: '{model}', n_ctx: 4096, threads: 1,"
        # a prompt decoded partly from the prefix cache may round differently from one
        # decoded whole: the same prompt twice must give the same greedy answer here
        " parallel: 1, prefix_cache: false}\n"
        "models:\n  tiny: {candidates: [engine]}\n"
    )
    return start_server(config, folder / f"{name}.log")


@pytest.fixture(scope="module")
def setup(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("resume-llamacpp")
    first = worker(tiny_model, folder, "first")
    second = worker(tiny_model, folder, "second")
    config = folder / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: first, backend: openai, base_url: '{first.api}', model: tiny}}\n"
        f"  - {{name: second, backend: openai, base_url: '{second.api}', model: tiny}}\n"
        "models:\n  tiny: {candidates: [first, second]}\n"
    )
    gateway = start_server(config, folder / "gateway.log")
    try:
        yield Setup(gateway, first, second)
    finally:
        for server in (gateway, first, second):
            if server.process.poll() is None:
                stop_server(server)


def test_an_engine_killed_mid_answer_is_continued_on_another(setup: Setup) -> None:
    with OpenAI(base_url=setup.gateway.api, api_key="sk-test", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="tiny",
            messages=HELLO,
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = []
        tokens_read = 0
        for chunk in stream:
            chunks.append(chunk)
            # the first chunk carries the role alone: the kill waits for three tokens
            tokens_read += bool(chunk.choices and chunk.choices[0].delta.content)
            if tokens_read == 3 and setup.first.process.poll() is None:
                setup.first.process.kill()  # the engine dies with its answer half written
                setup.first.process.wait()
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert [f for f in finishes if f is not None] == ["length"]
    assert len({c.id for c in chunks}) == 1
    usage = chunks[-1].usage
    assert usage is not None
    (resumed,) = (usage.model_extra or {})["resumed"]
    assert (resumed["deployment"], resumed["resumed_on"]) == ("first", "second")
    assert resumed["cause"] == "cut" and resumed["form"] == "prefill"
    after = resumed["after_tokens"]
    assert 3 <= after < MAX_TOKENS
    assert usage.completion_tokens == MAX_TOKENS  # the second was asked only for the rest
    assert resumed["completion_tokens"] == MAX_TOKENS - after

    # what the client read is what the first engine delivered, then exactly what the
    # second engine writes (greedy) when asked to continue that
    pieces = [c.choices[0].delta.content for c in chunks if c.choices]
    pieces = [p for p in pieces if p]
    delivered = "".join(pieces[:after])  # one text chunk a token
    with OpenAI(base_url=setup.second.api, api_key="sk-test", max_retries=0) as direct:
        rest = direct.chat.completions.create(
            model="tiny",
            messages=[*HELLO, {"role": "assistant", "content": delivered}],
            max_tokens=MAX_TOKENS - after,
            temperature=0,
            extra_body={"continue_final_message": True, "add_generation_prompt": False},
        )
    assert "".join(pieces) == delivered + (rest.choices[0].message.content or "")
