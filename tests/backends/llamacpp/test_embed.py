"""Embeddings from a llama.cpp deployment (`task: embed`), through a real gateway process,
the real tiny GGUF and the real openai SDK."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("embed")
    config = folder / "config.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: emb, backend: llamacpp, model: {tiny_model}, task: embed,"
        " n_ctx: 256, threads: 1}\n"
        f"  - {{name: gen, backend: llamacpp, model: {tiny_model}, n_ctx: 256, threads: 1}}\n"
        "models:\n"
        "  embed: {candidates: [emb]}\n"
        "  gen: {candidates: [gen]}\n"
    )
    server = start_server(config, folder / "server.log")
    yield server
    stop_server(server)


@pytest.fixture
def client(server: Server) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.api, api_key="sk-test", max_retries=0) as sdk:
        yield sdk


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def test_one_unit_vector_per_input_in_order(client: OpenAI) -> None:
    batch = client.embeddings.create(model="embed", input=["hello there", "world"])
    assert [d.index for d in batch.data] == [0, 1]
    first, second = (d.embedding for d in batch.data)
    assert len(first) == len(second) > 0
    assert abs(norm(first) - 1) < 1e-4 and abs(norm(second) - 1) < 1e-4
    assert first != second
    alone = client.embeddings.create(model="embed", input="hello there").data[0].embedding
    assert max(abs(a - b) for a, b in zip(alone, first, strict=True)) < 1e-4
    assert batch.usage.prompt_tokens == batch.usage.total_tokens > 2


def test_base64_is_little_endian_float32(client: OpenAI) -> None:
    floats = client.embeddings.create(model="embed", input="hello").data[0].embedding
    raw = client.embeddings.with_raw_response.create(
        model="embed", input="hello", encoding_format="base64"
    )
    encoded = raw.http_response.json()["data"][0]["embedding"]
    decoded = struct.unpack(f"<{len(floats)}f", base64.b64decode(encoded))
    assert max(abs(a - b) for a, b in zip(decoded, floats, strict=True)) < 1e-6


@pytest.mark.parametrize(
    ("request_fields", "param"),
    [
        ({"model": "embed", "input": [1, 2, 3]}, "input"),
        ({"model": "embed", "input": "x", "dimensions": 3}, "dimensions"),
        ({"model": "gen", "input": "x"}, "model"),
    ],
)
def test_bad_requests_are_400_with_param(
    client: OpenAI, request_fields: dict[str, object], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(**request_fields)  # type: ignore[call-overload]
    assert info.value.status_code == 400
    assert isinstance(info.value.body, dict) and info.value.body.get("param") == param


def test_too_long_input_is_refused_not_truncated(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model="embed", input="hello " * 400)
    assert info.value.code == "context_length_exceeded"


def test_chat_on_an_embedding_deployment_is_400(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="embeddings only"):
        client.chat.completions.create(model="embed", messages=[{"role": "user", "content": "hi"}])
