"""Answers as the protocol models write them validate against OpenAI's response schemas:
required keys present (``null`` where allowed), optional keys without ``null`` left out."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.admission.cache import chat_chunks, completion_chunks
from gateway.protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChoiceDelta,
    ChunkChoice,
    Completion,
    CompletionChoice,
    Embedding,
    EmbeddingResponse,
    Model,
    ModelList,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from gateway.protocol.chat import FunctionCall
from gateway.protocol.frames import DictFramed
from gateway.protocol.sse import frame
from tests.gateway.protocol.openapi import sse_data, violations

TOKEN = {"token": "hi", "logprob": -0.5, "bytes": [104, 105], "top_logprobs": []}


def written(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(model.model_dump_json())
    return data


def chat(**choice: Any) -> ChatCompletion:
    choice.setdefault("message", AssistantMessage(content="hello"))
    return ChatCompletion(model="m", choices=[Choice(**choice)], usage=Usage.of(3, 1))


def chunk(delta: ChoiceDelta, **choice: Any) -> ChatCompletionChunk:
    return ChatCompletionChunk(
        id="chatcmpl-1", created=1, model="m", choices=[ChunkChoice(delta=delta, **choice)]
    )


def test_a_plain_chat_answer_has_no_nulls_the_schema_forbids() -> None:
    data = written(chat())
    assert violations("CreateChatCompletionResponse", data) == []
    assert "system_fingerprint" not in data
    assert "prompt_tokens_details" not in data["usage"]
    message = data["choices"][0]["message"]
    assert "tool_calls" not in message
    assert message["refusal"] is None and data["choices"][0]["logprobs"] is None


def test_a_tool_call_answer_validates() -> None:
    call = ToolCall(id="call_1", function=FunctionCall(name="f", arguments="{}"))
    data = written(
        chat(message=AssistantMessage(content=None, tool_calls=[call]), finish_reason="tool_calls")
    )
    assert violations("CreateChatCompletionResponse", data) == []
    assert data["choices"][0]["message"]["content"] is None


def test_chat_logprobs_carry_the_required_refusal_key() -> None:
    # backends hand over logprobs as OpenAI's dict without the refusal list
    data = written(chat(logprobs={"content": [TOKEN]}))
    assert violations("CreateChatCompletionResponse", data) == []
    assert data["choices"][0]["logprobs"] == {"content": [TOKEN], "refusal": None}


def test_a_whole_answer_without_a_reason_reads_as_stopped() -> None:
    data = written(chat(finish_reason=None))
    assert data["choices"][0]["finish_reason"] == "stop"


def test_cached_usage_details_are_written_when_present() -> None:
    data = written(Usage.of(10, 2, cached_tokens=8))
    assert data["prompt_tokens_details"] == {"cached_tokens": 8}
    assert violations("CompletionUsage", data) == []


@pytest.mark.parametrize(
    "delta",
    [
        ChoiceDelta(role="assistant", content=""),
        ChoiceDelta(content="hel"),
        ChoiceDelta(),
        ChoiceDelta(
            role="assistant",
            tool_calls=[ToolCallDelta(index=0, id="c1", type="function", function={"name": "f"})],
        ),
        ChoiceDelta(tool_calls=[ToolCallDelta(index=0, function={"arguments": '{"a"'})]),
    ],
    ids=["role", "content", "empty", "tool-call-start", "tool-call-continuation"],
)
def test_stream_chunks_validate(delta: ChoiceDelta) -> None:
    data = written(chunk(delta))
    assert violations("CreateChatCompletionStreamResponse", data) == []
    assert None not in data["choices"][0]["delta"].values()
    for call in data["choices"][0]["delta"].get("tool_calls", []):
        assert None not in call.values()
    assert "usage" not in data and "system_fingerprint" not in data


def test_stream_chunk_logprobs_and_usage_chunk_validate() -> None:
    with_logprobs = written(chunk(ChoiceDelta(content="hi"), logprobs={"content": [TOKEN]}))
    assert violations("CreateChatCompletionStreamResponse", with_logprobs) == []
    assert with_logprobs["choices"][0]["logprobs"]["refusal"] is None
    usage = ChatCompletionChunk(id="c", created=1, model="m", choices=[], usage=Usage.of(3, 1))
    assert violations("CreateChatCompletionStreamResponse", written(usage)) == []


def test_cached_answers_replay_as_valid_chunks() -> None:
    call = ToolCall(id="call_1", function=FunctionCall(name="f", arguments="{}"))
    answer = chat(
        message=AssistantMessage(content="x", tool_calls=[call]),
        logprobs={"content": [TOKEN]},
    )
    stored = ChatCompletion.model_validate_json(answer.model_dump_json())
    assert written(stored) == written(answer)
    for replayed in chat_chunks(stored):
        assert violations("CreateChatCompletionStreamResponse", written(replayed)) == []


def test_completions_validate_whole_and_streamed() -> None:
    logprobs = {"tokens": ["a"], "token_logprobs": [-0.1], "top_logprobs": [{}], "text_offset": [0]}
    choice = CompletionChoice(text="a", finish_reason="length", logprobs=logprobs)
    whole = Completion(model="m", choices=[choice], usage=Usage.of(2, 1))
    data = written(whole)
    assert violations("CreateCompletionResponse", data) == []
    assert "system_fingerprint" not in data and data["choices"][0]["logprobs"] == logprobs
    for piece in completion_chunks(whole):
        assert violations("CreateCompletionStreamResponse", written(piece)) == []


def test_embeddings_and_models_validate() -> None:
    embeddings = EmbeddingResponse(model="m", data=[Embedding(embedding=[0.5, -0.5])])
    assert violations("CreateEmbeddingResponse", written(embeddings)) == []
    assert violations("ListModelsResponse", written(ModelList(data=[Model(id="m")]))) == []
    assert violations("Model", written(Model(id="m"))) == []


async def test_engine_dict_chunks_get_back_the_keys_the_schema_requires() -> None:
    # an in-process engine's chunks arrive with every null dropped
    async def engine() -> AsyncIterator[dict[str, Any]]:
        head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        choice = {"index": 0, "delta": {"content": "hi"}, "logprobs": {"content": []}}
        yield {**head, "choices": [choice]}
        yield {**head, "choices": [], "usage": Usage.of(1, 1).model_dump()}

    framed = DictFramed(engine(), "engine")
    frames = [piece async for piece in framed]
    assert len(frames) == 1 and framed.usage is not None
    (data,) = sse_data(frames[0].decode())
    assert violations("CreateChatCompletionStreamResponse", data) == []
    assert data["choices"][0]["finish_reason"] is None
    assert data["choices"][0]["logprobs"] == {"content": [], "refusal": None}


def test_frames_are_the_models_json() -> None:
    piece = chunk(ChoiceDelta(content="hi"))
    assert frame(piece) == b"data: " + piece.model_dump_json().encode() + b"\n\n"
