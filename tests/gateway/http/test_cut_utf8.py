"""A llama.cpp answer cut by ``max_tokens`` inside a multi-byte character, on a real
``shunter serve``: the incomplete character is held back, never sent as U+FFFD."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import Server

# the demo vocabulary spells "€" as three byte tokens, so two tokens end inside it
FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "euro", "schema": {"type": "string", "enum": ["€€"]}},
}


def _chat(server: Server, max_tokens: int, stream: bool) -> httpx.Response:
    body: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "price?"}],
        "max_tokens": max_tokens,
        "response_format": FORMAT,
        "stream": stream,
    }
    return httpx.post(f"{server.api}/chat/completions", json=body, timeout=60)


@pytest.mark.parametrize("max_tokens", [2, 3, 5])
def test_a_whole_answer_cut_inside_a_character_ends_before_it(
    server: Server, max_tokens: int
) -> None:
    answer = _chat(server, max_tokens, stream=False)
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert "\ufffd" not in choice["message"]["content"]
    assert '"€€'.startswith(choice["message"]["content"])


@pytest.mark.parametrize("max_tokens", [2, 3, 5])
def test_a_streamed_answer_cut_inside_a_character_ends_before_it(
    server: Server, max_tokens: int
) -> None:
    answer = _chat(server, max_tokens, stream=True)
    assert answer.status_code == 200, answer.text
    frames = [line[6:] for line in answer.text.splitlines() if line.startswith("data: {")]
    chunks = [json.loads(frame)["choices"] for frame in frames]
    text = "".join(c[0]["delta"].get("content") or "" for c in chunks if c)
    assert "\ufffd" not in text and '"€€'.startswith(text), text
