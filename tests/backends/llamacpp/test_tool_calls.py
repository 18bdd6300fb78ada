"""Tool calls on the llama.cpp engine (backends/llamacpp/tools.py), driven in-process on the
generated tiny model: its output is random, so only the grammar makes it a call."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.settings import LlamaCppSettings
from gateway.errors import InvalidRequestError
from gateway.protocol import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest

SCHEMAS: dict[str, dict[str, Any]] = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
    "add": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    "label": {  # with definitions, as pydantic writes schemas
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}, "maxItems": 3},
            "urgent": {"type": "boolean"},
            "note": {"type": "string", "maxLength": 8},
        },
        "required": ["tags", "urgent"],
        "additionalProperties": False,
        "$defs": {"Tag": {"type": "string", "enum": ["bug", "feature", "docs"]}},
    },
}
TOOLS = [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in SCHEMAS.items()]
Calls = list[tuple[str, str]]


@pytest.fixture(scope="module")
async def backend(tiny_model: Path) -> AsyncIterator[LlamaCppBackend]:
    settings = LlamaCppSettings.model_validate(
        {
            "name": "tiny",
            "backend": "llamacpp",
            "model": str(tiny_model),
            "n_ctx": 2048,
            "parallel": 8,
            "threads": 1,
            "max_queue": 64,
        }
    )
    backend = LlamaCppBackend(settings)
    await backend.start()
    yield backend
    await backend.aclose()


def _request(**kwargs: Any) -> ChatCompletionRequest:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Label the weather, then add 2 and 3."}],
        "tools": TOOLS,
        "max_tokens": 600,
        **kwargs,
    }
    return ChatCompletionRequest.model_validate(body)


def _calls(out: ChatCompletion) -> Calls:
    return [
        (c.function.name, c.function.arguments) for c in out.choices[0].message.tool_calls or []
    ]


def _valid(name: str, arguments: str) -> bool:
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])
    return True


async def test_required_always_answers_with_schema_valid_calls(backend: LlamaCppBackend) -> None:
    requests = [
        _request(tool_choice="required", temperature=t, seed=s, parallel_tool_calls=p)
        for p in (False, True)
        for t in (0.4, 1.0, 1.8)
        for s in range(8)
    ]
    outs = await asyncio.gather(*(backend.chat(r) for r in requests))
    chosen: Counter[str] = Counter()
    counts: Counter[int] = Counter()
    for request, out in zip(requests, outs, strict=True):
        choice = out.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.content is None
        calls = choice.message.tool_calls or []
        assert calls and all(c.id.startswith("call_") for c in calls)
        assert all(_valid(c.function.name, c.function.arguments) for c in calls)
        if request.parallel_tool_calls is False:
            assert len(calls) == 1
        chosen.update(c.function.name for c in calls)
        counts[len(calls)] += 1
    assert len(chosen) > 1  # a call to any of the tools, not always the same one
    assert max(counts) > 1  # and several in one answer when parallel calls are allowed


async def _stream(backend: LlamaCppBackend, request: ChatCompletionRequest) -> list[Any]:
    return [chunk async for chunk in backend.chat_stream(request)]


def _reassembled(chunks: list[ChatCompletionChunk]) -> tuple[str | None, Calls, str | None]:
    """Content, calls and finish reason from a stream, checking the deltas as OpenAI sends
    them: a call's first delta has its id, type and name, later ones only arguments."""
    content: list[str] = []
    calls: list[list[str]] = []
    finish = None
    for chunk in chunks:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            content.append(choice.delta.content or "")
            for delta in choice.delta.tool_calls or []:
                function = delta.function or {}
                if delta.index == len(calls):
                    assert delta.id and delta.id.startswith("call_") and delta.type == "function"
                    calls.append([function["name"], function.get("arguments", "")])
                else:
                    assert delta.id is None and delta.type is None and "name" not in function
                    calls[delta.index][1] += function["arguments"]
    return "".join(content) or None, [(n, a) for n, a in calls], finish


@pytest.mark.parametrize(
    "sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 11}], ids=["greedy", "seeded"]
)
@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "label"}}], ids=str
)
async def test_streamed_calls_reassemble_to_the_whole_answer(
    backend: LlamaCppBackend, choice: Any, sampling: dict[str, Any]
) -> None:
    request = _request(tool_choice=choice, **sampling)
    whole = await backend.chat(request)
    content, calls, finish = _reassembled(await _stream(backend, request))
    assert calls == _calls(whole) and calls
    assert (content, finish) == (None, "tool_calls") == (whole.choices[0].message.content, finish)
    assert all(_valid(name, arguments) for name, arguments in calls)
    if choice != "required":
        assert [name for name, _ in calls] == ["label"]
        assert calls[0][1] == calls[0][1].strip()  # the grammar's trailing space is not sent


async def test_auto_reads_no_call_from_babble_and_streams_the_same(
    backend: LlamaCppBackend,
) -> None:
    request = _request(tool_choice="auto", temperature=0, max_tokens=40)
    whole = await backend.chat(request)
    content, calls, finish = _reassembled(await _stream(backend, request))
    assert whole.choices[0].message.tool_calls is None and calls == []
    assert content == whole.choices[0].message.content and content
    assert finish == whole.choices[0].finish_reason == "length"


async def test_tools_reach_the_prompt_unless_tool_choice_is_none(
    backend: LlamaCppBackend,
) -> None:
    def prompt_tokens(out: ChatCompletion) -> int:
        assert out.usage is not None
        return out.usage.prompt_tokens

    plain = await backend.chat(_request(tools=None, max_tokens=1))
    none = await backend.chat(_request(tool_choice="none", max_tokens=1))
    auto = await backend.chat(_request(tool_choice="auto", max_tokens=1))
    assert prompt_tokens(none) == prompt_tokens(plain) < prompt_tokens(auto)
    assert none.choices[0].message.tool_calls is None


async def test_auto_with_a_response_format_gives_calls_or_that_response(
    backend: LlamaCppBackend,
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "enum": ["yes", "no"]},
            "n": {"$ref": "#/$defs/N"},
        },
        "required": ["answer", "n"],
        "additionalProperties": False,
        "$defs": {"N": {"type": "integer"}},
    }
    form = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    requests = [_request(response_format=form, temperature=1.0, seed=s) for s in range(12)]
    kinds: Counter[str] = Counter()
    for out in await asyncio.gather(*(backend.chat(r) for r in requests)):
        message = out.choices[0].message
        if message.tool_calls:
            assert message.content is None and out.choices[0].finish_reason == "tool_calls"
            assert all(_valid(name, arguments) for name, arguments in _calls(out))
            kinds["calls"] += 1
        else:
            jsonschema.validate(json.loads(message.content or ""), schema)
            assert out.choices[0].finish_reason == "stop"
            kinds["response"] += 1
    assert set(kinds) == {"calls", "response"}
    for request in requests[:4]:
        whole = await backend.chat(request)
        content, calls, finish = _reassembled(await _stream(backend, request))
        assert (content, calls) == (whole.choices[0].message.content, _calls(whole))
        assert finish == whole.choices[0].finish_reason


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": None, "tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": "string"}},
                    }
                ],
                "tool_choice": "required",
            },
            "tools[0].function.parameters",
        ),
    ],
    ids=["required-without-tools", "unknown-name", "non-object-parameters"],
)
async def test_choices_that_cannot_be_met_are_400(
    backend: LlamaCppBackend, body: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        await backend.chat(_request(**body))
    assert caught.value.param == param


@pytest.mark.parametrize("pattern", ["ab+c", "^id-[0-9]{2}", "[0-9]{3}$"])
async def test_a_pattern_matches_anywhere_as_json_schema_says(
    backend: LlamaCppBackend, pattern: str
) -> None:
    """A pattern without anchors is valid JSON Schema (it may match anywhere in the
    string): the call is made, and its argument matches the pattern as a search does."""
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": pattern}},
        "required": ["code"],
        "additionalProperties": False,
    }
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": schema}}]
    requests = [
        _request(tools=tools, tool_choice="required", seed=seed, max_tokens=200)
        for seed in range(6)
    ]
    outs = await asyncio.gather(*(backend.chat(r) for r in requests))
    whole = [out for out in outs if out.choices[0].finish_reason == "tool_calls"]
    assert whole  # the tiny model babbles: some calls run past max_tokens, not all
    for out in whole:
        (name, arguments), *_ = _calls(out)
        assert name == "lookup"
        code = json.loads(arguments)["code"]
        assert re.search(pattern, code), code
