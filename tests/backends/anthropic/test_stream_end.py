"""Anthropic streams that end without ``message_stop``, and the model name answers carry."""

from __future__ import annotations

import pytest

from gateway.errors import StreamCutError
from tests.backends.anthropic.test_anthropic import (
    STREAM_EVENTS,
    TEXT_MESSAGE,
    Upstream,
    chat,
    json_answer,
    started,
    stream_answer,
)


async def test_a_finished_message_without_message_stop_is_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert STREAM_EVENTS[-1]["type"] == "message_stop"
    backend = await started(Upstream(stream_answer(STREAM_EVENTS[:-1])), monkeypatch)
    chunks = [c async for c in backend.chat_stream(chat(stream=True))]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 89
    assert {c.model for c in chunks} == {"alias"}  # the public name, not the upstream's


async def test_a_stream_cut_before_its_stop_reason_is_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cut = [e for e in STREAM_EVENTS if e["type"] not in ("message_delta", "message_stop")]
    backend = await started(Upstream(stream_answer(cut)), monkeypatch)
    with pytest.raises(StreamCutError, match="message_stop"):
        [c async for c in backend.chat_stream(chat(stream=True))]


async def test_a_whole_answer_carries_the_public_model_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = await started(Upstream(json_answer(TEXT_MESSAGE)), monkeypatch)
    assert (await backend.chat(chat())).model == "alias"
