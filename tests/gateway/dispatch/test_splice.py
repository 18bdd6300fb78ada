"""The pure parts of a resume: what a client was sent, the continuation request, the
overlap a user-turn answer repeats, and the continuation's chunks made the first stream's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.dispatch.midstream.splice import (
    Delivered,
    Overlap,
    ResumeDivergedError,
    Splice,
    continuation,
    read_frames,
)
from gateway.protocol import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    CompletionRequest,
    Usage,
)

RAW = (
    b'data: {"id":"c1","created":7,"model":"pub","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","created":7,"model":"pub","choices":[{"index":0,'
    b'"delta":{"content":"lo "},"finish_reason":null}]}\n\n'
)


def chat(**fields: object) -> ChatCompletionRequest:
    body = {"model": "pub", "messages": [{"role": "user", "content": "hi"}], **fields}
    return ChatCompletionRequest.model_validate(body)


def test_delivered_frames_are_read_back_only_as_sent() -> None:
    # two frames in one piece (one upstream read), then one split over two pieces is not
    # a frame the client could have parsed: only whole frames count
    third = b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"wor'
    delivered = read_frames([RAW, third, b": a comment\n\n", b"data: [DONE]\n\n"])
    assert delivered.text == "Hello " and delivered.tokens == 2
    assert (delivered.id, delivered.created, delivered.model) == ("c1", 7, "pub")
    assert delivered.unresumable(chat()) is None


@pytest.mark.parametrize(
    ("frame", "request_fields", "why"),
    [
        (b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}', {}, "finished"),
        (b'{"choices":[{"index":1,"delta":{"content":"x"}}]}', {}, "several"),
        (b'{"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}', {}, "reasoning"),
        (b'{"choices":[]}', {"response_format": {"type": "json_object"}}, "structured"),
        (b'{"choices":[]}', {"tool_choice": "required", "tools": []}, "forced"),
    ],
)
def test_what_cannot_be_continued_says_why(
    frame: bytes, request_fields: dict[str, object], why: str
) -> None:
    delivered = read_frames([RAW, b"data: " + frame + b"\n\n"])
    reason = delivered.unresumable(chat(**request_fields))
    assert reason is not None and why in reason


def test_the_continuation_request_in_each_form() -> None:
    delivered = read_frames([RAW])
    request = chat(max_completion_tokens=10, temperature=0, n=1)
    prefill = continuation(request, delivered, "prefill")
    assert isinstance(prefill, ChatCompletionRequest)
    assert prefill.messages[-1].role == "assistant" and prefill.messages[-1].content == "Hello "
    assert (prefill.model_extra or {})["continue_final_message"] is True
    assert prefill.max_completion_tokens == 8 and prefill.temperature == 0
    assert prefill.stream is True and prefill.n is None
    turn = continuation(request, delivered, "user_turn")
    assert isinstance(turn, ChatCompletionRequest)
    assert turn.messages[-1].role == "user"
    assert str(turn.messages[-1].content).endswith("<partial_answer>\nHello \n</partial_answer>")
    assert "continue_final_message" not in (turn.model_extra or {})
    text = continuation(
        CompletionRequest(model="pub", prompt="Say: ", max_tokens=5), delivered, "text"
    )
    assert isinstance(text, CompletionRequest)
    assert text.prompt == "Say: Hello " and text.max_tokens == 3


@pytest.mark.parametrize(
    ("delivered", "pieces", "expected"),
    [
        ("The capital of Fra", ["France is", " Paris."], "nce is Paris."),
        ("word0 word1 word2 ", ["word2 ", "word3 "], "word3 "),
        ("a b c ", ["a b c d"], "d"),  # the whole delivered text said again
        ("it is a", ["and more"], "and more"),  # a one-letter coincidence is new text
        ("ends here.", [" Next", " one"], " Next one"),  # nothing repeated
        ("abc", ["ab"], "ab"),  # ended while it could still have been a repeat
        ("one two three four ", ["one two ", "three four five"], "five"),  # from the top
        ("one two three four ", ["two three", " four five"], "five"),  # from the middle
        ("one two three", ["one two"], ""),  # ended still repeating: nothing new
    ],
)
def test_the_overlap_a_user_turn_answer_repeats_is_trimmed(
    delivered: str, pieces: list[str], expected: str
) -> None:
    trim = Overlap(delivered)
    out = "".join(trim.feed(p) for p in pieces) + trim.flush()
    assert out == expected


def _chunk(content: str | None, finish: str | None = None, role: str | None = None) -> dict:
    delta: dict[str, object] = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "other", "created": 9, "model": "up-b", "choices": [choice]}


async def _source(chunks: list[dict]) -> AsyncIterator[ChatCompletionChunk]:
    for chunk in chunks:
        yield ChatCompletionChunk.model_validate(chunk)


def test_the_continuation_becomes_the_first_streams_chunks() -> None:
    delivered = Delivered(id="c1", created=7, model="pub", parts=["one two "], tokens=2)
    closed: list[tuple[Usage | None, int]] = []

    def close(own: Usage | None, tokens: int) -> Usage:
        closed.append((own, tokens))
        return Usage.of(3, 2 + tokens)

    splice = Splice(delivered, close, Overlap("one two "))
    first = ChatCompletionChunk.model_validate(_chunk("", role="assistant"))
    rest = _source(
        [_chunk("two "), _chunk("six "), _chunk(None, "stop"), {**_chunk(None), "choices": []}]
    )

    async def run() -> list[ChatCompletionChunk]:
        return [c async for c in splice.chunks(first, rest)]  # type: ignore[misc]

    out = asyncio.run(run())
    assert [(c.id, c.created, c.model) for c in out] == [("c1", 7, "pub")] * 3
    assert [c.choices[0].delta.content for c in out[:2]] == ["six ", None]
    assert all(c.choices[0].delta.role is None for c in out[:2])
    assert out[1].choices[0].finish_reason == "stop"
    assert out[2].choices == [] and out[2].usage == Usage.of(3, 3)
    assert closed == [(None, 1)]  # the continuation sent no usage: its text chunks count


def _call(index: int, arguments: str, opens: bool = False) -> dict:
    call: dict[str, object] = {"index": index, "function": {"arguments": arguments}}
    if opens:
        call.update(id=f"call_{index}", type="function")
        call["function"] = {"name": f"tool{index}", "arguments": arguments}
    return call


def _calls(*calls: dict, finish: str | None = None) -> dict:
    choice = {"index": 0, "delta": {"tool_calls": list(calls)}, "finish_reason": finish}
    return {**_chunk(None, finish), "choices": [choice]}


def _frame(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _spliced(delivered: Delivered, chunks: list[dict]) -> list[ChatCompletionChunk]:
    splice = Splice(delivered, lambda own, tokens: Usage.of(1, tokens))
    first = ChatCompletionChunk.model_validate(chunks[0])

    async def run() -> list[ChatCompletionChunk]:
        return [c async for c in splice.chunks(first, _source(chunks[1:]))]  # type: ignore[misc]

    return asyncio.run(run())


def test_tool_calls_under_way_are_read_back() -> None:
    frames = [_calls(_call(0, '{"a": ', opens=True)), _calls(_call(0, '"x'))]
    delivered = read_frames([RAW, *map(_frame, frames)])
    assert delivered.text == "Hello " and delivered.tokens == 2
    (call,) = delivered.calls.values()
    assert (call.id, call.name, call.arguments) == ("call_0", "tool0", '{"a": "x')
    assert delivered.unresumable(chat()) is None


def test_a_tool_call_written_again_goes_on_where_the_client_is() -> None:
    delivered = read_frames([_frame(_calls(_call(0, '{"a": "x', opens=True)))])
    out = _spliced(
        delivered,
        [
            _calls(_call(0, '{"a"', opens=True)),
            _calls(_call(0, ': "xy')),
            _calls(_call(0, 'z"}'), _call(1, "{}", opens=True)),
            _chunk(None, "tool_calls"),
        ],
    )
    sent = [d for c in out if c.choices for d in c.choices[0].delta.tool_calls or ()]
    assert [(d.index, d.id, (d.function or {}).get("arguments")) for d in sent] == [
        (0, None, "y"),
        (0, None, 'z"}'),
        (1, "call_1", "{}"),  # a call the client had not seen comes whole
    ]
    assert all("name" not in (d.function or {}) for d in sent if d.index == 0)
    assert [c.choices[0].finish_reason for c in out if c.choices][-1] == "tool_calls"


@pytest.mark.parametrize(
    "chunks",
    [
        [_calls(_call(0, '{"b": 1}', opens=True)), _chunk(None, "tool_calls")],  # other args
        [_chunk("no call after all", "stop")],  # the call never written again
    ],
)
def test_a_continuation_that_departs_from_a_call_sent_is_refused(chunks: list[dict]) -> None:
    delivered = read_frames([_frame(_calls(_call(0, '{"a": 1', opens=True)))])
    with pytest.raises(ResumeDivergedError) as info:
        _spliced(delivered, chunks)
    assert info.value.code == "resume_diverged" and not info.value.counts_as_failure


def test_an_answer_started_again_that_departs_from_the_text_is_refused() -> None:
    delivered = "The gateway routes each request to the first healthy candidate "
    trim = Overlap(delivered)
    assert trim.feed("The gateway routes each request to ") == ""
    with pytest.raises(ResumeDivergedError):
        trim.feed("a random candidate.")


# words as in prose: no word said twice (here: no two start alike, no letter twice in one),
# so an answer has one reading; a text that repeats itself can be read several ways
WORDS = st.lists(
    st.permutations("abcdefghijklmnopqrst").map(lambda letters: "".join(letters[:5])),
    min_size=2,
    max_size=20,
    unique_by=lambda word: word[0],
)


@st.composite
def cut_and_restart(draw: st.DrawFn) -> tuple[str, int, int, list[int]]:
    """An answer of distinct words, where it was cut, where the fallback's answer starts
    (a word start at or before the cut, or the cut itself) and how it is chunked. A restart
    one or two characters before the cut reads as new text ("it is a" then "and"): those
    few characters cannot tell a repeat from a word that starts alike."""
    original = " ".join(draw(WORDS)) + "."
    cut = draw(st.integers(1, len(original) - 1))
    spaces = [i + 1 for i, ch in enumerate(original[:cut]) if ch == " "]
    starts = [0, cut] + [at for at in spaces if cut - at >= 3]
    restart = draw(st.sampled_from(sorted(set(starts))))
    sizes = draw(st.lists(st.integers(1, 12), min_size=1, max_size=60))
    return original, cut, restart, sizes


def _pieces(text: str, sizes: list[int]) -> list[str]:
    pieces, at = [], 0
    for size in sizes * (len(text) // len(sizes) + 1):
        if at >= len(text):
            break
        pieces.append(text[at : at + size])
        at += size
    return pieces


@given(cut_and_restart())
@settings(max_examples=400, deadline=None)
def test_any_cut_and_any_restart_gives_the_text_exactly_once_or_the_error(
    case: tuple[str, int, int, list[int]],
) -> None:
    original, cut, restart, sizes = case
    delivered = Delivered(id="c1", created=7, model="pub", parts=[original[:cut]], tokens=1)
    answer = [_chunk(p) for p in _pieces(original[restart:], sizes)]
    answer.append(_chunk(None, "stop"))
    try:
        out = _spliced_with_trim(delivered, answer)
    except ResumeDivergedError:
        return  # the in-band error: allowed, never a glued answer
    sent = "".join(c.choices[0].delta.content or "" for c in out if c.choices)
    assert original[:cut] + sent == original


def _spliced_with_trim(delivered: Delivered, chunks: list[dict]) -> list[ChatCompletionChunk]:
    splice = Splice(delivered, lambda own, tokens: Usage.of(1, tokens), Overlap(delivered.text))
    first, *rest = chunks

    async def run() -> list[ChatCompletionChunk]:
        head = ChatCompletionChunk.model_validate(first)
        return [c async for c in splice.chunks(head, _source(rest))]  # type: ignore[misc]

    return asyncio.run(run())
