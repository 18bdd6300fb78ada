"""A continuation asked of Anthropic (a resumed stream's prefill): the last assistant turn
is continued natively, without the trailing whitespace Anthropic refuses there, and the
whitespace the answer then repeats is not sent twice. Anthropic's API is a managed edge:
its wire is played by a MockTransport."""

from __future__ import annotations

from typing import Any

import pytest

from backends.base import CONTINUE_FINAL
from tests.backends.anthropic.test_anthropic import (
    MESSAGE_START,
    Upstream,
    block,
    chat,
    collect,
    delta,
    event,
    started,
    stream_answer,
)

EVENTS = [
    MESSAGE_START,
    block(0, "text", text=""),
    delta(0, "text_delta", text=" upon"),
    delta(0, "text_delta", text=" a time"),
    event("content_block_stop", index=0),
    event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3}),
    event("message_stop"),
]


def continuing(said: str) -> dict[str, Any]:
    history = [{"role": "user", "content": "a story"}, {"role": "assistant", "content": said}]
    return {"messages": history, "stream": True, **CONTINUE_FINAL}


@pytest.mark.parametrize(
    ("said", "sent", "text"),
    [
        ("Once ", "Once", "upon a time"),  # the space it repeats was delivered already
        ("Once", "Once", " upon a time"),
        ("  ", None, "upon a time"),  # only whitespace: no assistant turn at all
    ],
)
async def test_a_continuation_ends_the_prefill_without_whitespace(
    monkeypatch: pytest.MonkeyPatch, said: str, sent: str | None, text: str
) -> None:
    upstream = Upstream(stream_answer(EVENTS))
    backend = await started(upstream, monkeypatch)
    chunks = await collect(backend, chat(**continuing(said)))
    await backend.aclose()
    turns = upstream.body()["messages"]
    if sent is None:
        assert [t["role"] for t in turns] == ["user"]
    else:
        assert turns[-1] == {"role": "assistant", "content": [{"type": "text", "text": sent}]}
    assert "continue_final_message" not in upstream.body()
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text


async def test_an_ordinary_last_assistant_turn_is_sent_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream = Upstream(stream_answer(EVENTS))
    backend = await started(upstream, monkeypatch)
    history = [{"role": "user", "content": "a story"}, {"role": "assistant", "content": "Once "}]
    await collect(backend, chat(messages=history, stream=True))
    await backend.aclose()
    assert upstream.body()["messages"][-1]["content"] == [{"type": "text", "text": "Once "}]
