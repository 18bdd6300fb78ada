"""A request that fails validation names the request field at fault, as OpenAI writes it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, get_args

import pytest
from pydantic import BaseModel, ValidationError, model_validator

from gateway.errors import InvalidRequestError
from gateway.protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from gateway.protocol.validation import field_path, is_type_tag, request_error

USER = [{"role": "user", "content": "hi"}]
REQUESTS: list[type[BaseModel]] = [ChatCompletionRequest, CompletionRequest, EmbeddingRequest]


def error_for(model: type[BaseModel], body: Any) -> InvalidRequestError:
    with pytest.raises(ValidationError) as info:
        model.model_validate_json(json.dumps(body))
    return request_error(info.value)


@pytest.mark.parametrize(
    ("model", "body", "param"),
    [
        (CompletionRequest, {"model": "m", "prompt": 5}, "prompt"),
        (CompletionRequest, {"model": "m", "prompt": ["a", 1]}, "prompt[1]"),
        (CompletionRequest, {"model": "m", "prompt": "a", "stop": [1]}, "stop[0]"),
        (
            ChatCompletionRequest,
            {"model": "m", "messages": USER, "tool_choice": "x"},
            "tool_choice",
        ),
        (
            ChatCompletionRequest,
            {"model": "m", "messages": USER, "tool_choice": {"type": "function"}},
            "tool_choice.function",
        ),
        (
            ChatCompletionRequest,
            {"model": "m", "messages": [{"role": "user", "content": 5}]},
            "messages[0].content",
        ),
        (
            ChatCompletionRequest,
            {"model": "m", "messages": [{"role": "user", "content": [{"text": "a"}]}]},
            "messages[0].content[0].type",
        ),
        (
            ChatCompletionRequest,
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": "a"},
                    {"role": "user", "content": [{"type": "image_url", "image_url": {}}]},
                ],
            },
            "messages[1].content[0].image_url.url",
        ),
        (ChatCompletionRequest, {"model": "m", "messages": ["hi"]}, "messages[0]"),
        (ChatCompletionRequest, {"model": "m", "messages": []}, "messages"),
        (ChatCompletionRequest, {"messages": USER}, "model"),
        (
            ChatCompletionRequest,
            {"model": "m", "messages": USER, "response_format": {"type": "json_schema"}},
            "response_format",
        ),
        (
            ChatCompletionRequest,
            {"model": "m", "messages": USER, "tools": [{"type": "function", "function": {}}]},
            "tools[0].function.name",
        ),
        (
            ChatCompletionRequest,
            {"model": "m", "messages": USER, "logit_bias": {"7": "x"}},
            "logit_bias.7",
        ),
        (EmbeddingRequest, {"model": "m", "input": {}}, "input"),
        (EmbeddingRequest, {"model": "m", "input": [[1, "a"]]}, "input[0][1]"),
        (
            EmbeddingRequest,
            {"model": "m", "input": "a", "encoding_format": "hex"},
            "encoding_format",
        ),
    ],
)
def test_param_is_the_request_field_path(model: type[BaseModel], body: Any, param: str) -> None:
    error = error_for(model, body)
    assert error.param == param
    assert error.status_code == 400 and f"'{param}'" in error.message


def test_union_errors_say_every_accepted_form() -> None:
    error = error_for(CompletionRequest, {"model": "m", "prompt": 5})
    said = "Input should be a valid string, or a valid array"
    assert error.message == f"Invalid value for 'prompt': {said}"
    choice = error_for(ChatCompletionRequest, {"model": "m", "messages": USER, "tool_choice": "x"})
    assert "'none', 'auto' or 'required', or an object" in choice.message


def test_missing_fields_and_bodies_that_are_not_objects() -> None:
    missing = error_for(ChatCompletionRequest, {"messages": USER})
    assert missing.message == "Missing required parameter: 'model'."
    for body in ([1], "text", 3):
        assert error_for(ChatCompletionRequest, body).param is None
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest.model_validate_json(b"{not json")
    assert "could not parse the JSON body" in request_error(info.value).message


def test_location_tags_are_left_out() -> None:
    loc = ("messages", 0, "content", "list[ContentPart]", 0, "ContentPart", "type")
    assert field_path(loc) == "messages[0].content[0].type"
    assert field_path(("tool_choice", "literal['none','auto','required']")) == "tool_choice"
    assert field_path(("stop", "function-after[check(), str]")) == "stop"
    assert field_path(("logit_bias", "7", "[key]")) == "logit_bias.7"
    assert field_path(()) is None


def _field_names(model: type[BaseModel], seen: set[type[BaseModel]]) -> Iterator[str]:
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        yield name
        if field.alias:
            yield field.alias
        for nested in _models_in(field.annotation):
            yield from _field_names(nested, seen)


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in get_args(annotation):
        yield from _models_in(arg)


@pytest.mark.parametrize("model", REQUESTS, ids=lambda m: m.__name__)
def test_no_request_field_reads_as_a_type_tag(model: type[BaseModel]) -> None:
    names = set(_field_names(model, set()))
    assert len(names) >= 5
    assert [name for name in names if is_type_tag(name)] == []


class _Ranged(BaseModel):
    low: int
    high: int

    @model_validator(mode="after")
    def _ordered(self) -> _Ranged:
        if self.low > self.high:
            raise ValueError("low must not exceed high")
        return self


def test_a_check_of_the_whole_request_names_no_field() -> None:
    error = error_for(_Ranged, {"low": 2, "high": 1})
    assert error.param is None and error.message == "low must not exceed high"
