"""Anthropic Messages ⇄ chat: each mapping undone by its inverse."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequestError
from gateway.protocol import Usage
from gateway.protocol.chat import NamedToolChoice
from gateway.protocol.messages import ImageSource, error_status, error_type
from gateway.protocol.messages_codec import (
    CHAT_TOOL_CHOICES,
    chat_tool,
    chat_tool_choice,
    chat_usage,
    document_of_file,
    file_of_document,
    finish_reason,
    image_source,
    image_url,
    message_usage,
    messages_tool,
    messages_tool_choice,
    stop_reason,
    tool_arguments,
    tool_input,
)


@pytest.mark.parametrize("reason", ["stop", "length", "tool_calls", "content_filter"])
def test_a_finish_reason_comes_back_from_its_stop_reason(reason: str) -> None:
    assert finish_reason(stop_reason(reason)) == reason


def test_stop_reasons_only_messages_has_read_as_their_nearest() -> None:
    assert finish_reason("stop_sequence") == "stop" and finish_reason("pause_turn") == "stop"
    assert finish_reason("model_context_window_exceeded") == "length"
    assert finish_reason("something new") == "stop" and finish_reason(None) is None
    assert stop_reason(None) == "end_turn" and stop_reason("function_call") == "tool_use"


@pytest.mark.parametrize("kind", [*CHAT_TOOL_CHOICES, "tool"])
def test_a_tool_choice_comes_back_from_chat(kind: str) -> None:
    chat = chat_tool_choice(kind, "get_weather" if kind == "tool" else None)
    choice = NamedToolChoice.model_validate(chat) if isinstance(chat, dict) else chat
    back = messages_tool_choice(choice, parallel_tool_calls=False)  # type: ignore[arg-type]
    assert back is not None and back["type"] == kind
    assert back.get("name") == ("get_weather" if kind == "tool" else None)
    # parallel tool calls are off only where a tool may be called at all
    assert back.get("disable_parallel_tool_use") == (True if kind != "none" else None)


def test_chat_left_to_its_default_says_nothing_of_tool_choice() -> None:
    assert messages_tool_choice(None, None) is None
    assert messages_tool_choice(None, False) == {"type": "auto", "disable_parallel_tool_use": True}


def test_a_tool_declaration_comes_back() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    function = chat_tool("get_weather", "Weather now", schema)["function"]
    back = messages_tool(function["name"], function["description"], function["parameters"])
    assert back == {"name": "get_weather", "input_schema": schema, "description": "Weather now"}
    assert chat_tool("t", None, None)["function"] == {"name": "t", "parameters": {"type": "object"}}
    assert messages_tool("t", None, None) == {
        "name": "t",
        "input_schema": {"type": "object", "properties": {}},
    }


@pytest.mark.parametrize("value", [{"city": "Zürich", "days": [1, 2]}, {}])
def test_a_tool_input_comes_back_from_its_arguments(value: dict[str, Any]) -> None:
    assert tool_input(tool_arguments(value)) == value
    assert "Zürich" in tool_arguments({"city": "Zürich"})  # as written, not escaped


def test_arguments_that_are_no_json_object_still_make_an_input() -> None:
    assert tool_input("not json") == {"arguments": "not json"}
    assert tool_input("[1]") == {"value": [1]} and tool_input("") == {}


@pytest.mark.parametrize(
    "url", ["data:image/png;base64,iVBORw0KGgo=", "https://example.com/cat.png"]
)
def test_an_image_comes_back_from_its_source(url: str) -> None:
    source = image_source(url, param="p")
    ImageSource.model_validate(source)
    assert image_url(source, param="p") == url


def test_images_that_cannot_be_mapped_name_the_field() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        image_source("ftp://example.com/cat.png", param="messages[2].content")
    assert caught.value.param == "messages[2].content"
    with pytest.raises(InvalidRequestError) as caught:
        image_url({"type": "url"}, param="messages[0].content[1].source")
    assert caught.value.param == "messages[0].content[1].source.url"
    with pytest.raises(InvalidRequestError):
        image_url({"type": "base64", "data": "x"}, param="p")


PDF_SOURCE = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}


def test_a_document_comes_back_from_its_file() -> None:
    file = file_of_document(PDF_SOURCE, "report.pdf", param="p")
    assert file == {
        "file_data": "data:application/pdf;base64,JVBERi0xLjQK",
        "filename": "report.pdf",
    }
    block = document_of_file(file, param="p")
    assert block == {"type": "document", "source": PDF_SOURCE, "title": "report.pdf"}


def test_a_document_without_a_title_still_gives_its_file_a_name() -> None:
    assert file_of_document(PDF_SOURCE, None, param="p")["filename"] == "document.pdf"


def test_documents_and_files_that_cannot_be_mapped_name_the_field() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        file_of_document({"type": "base64", "media_type": "application/pdf"}, None, param="s")
    assert caught.value.param == "s"
    for file in ({"file_id": "file-abc"}, {"file_data": "JVBERi0xLjQK"}):
        with pytest.raises(InvalidRequestError) as caught:
            document_of_file(file, param="messages[1].content")
        assert caught.value.param == "messages[1].content.file.file_data"


def test_usage_comes_back_with_its_cache_reads() -> None:
    usage = Usage.of(120, 30, cached_tokens=100)
    sent = message_usage(usage)
    assert (sent.input_tokens, sent.cache_read_input_tokens, sent.output_tokens) == (20, 100, 30)
    assert chat_usage(sent.model_dump()) == usage
    assert message_usage(None).input_tokens == 0


@pytest.mark.parametrize("status", [400, 401, 402, 403, 404, 413, 429, 500, 504, 529])
def test_an_error_status_comes_back_from_its_type(status: int) -> None:
    assert error_status(error_type(status)) == status


def test_overload_and_unknown_error_types() -> None:
    assert error_status("overloaded_error") == 529 and error_status("api_error") == 500
    assert error_status("brand_new_error") == 500


def test_server_tool_use_is_read_by_tool_name_and_never_written_out() -> None:
    usage = chat_usage(
        {
            "input_tokens": 5,
            "output_tokens": 2,
            "server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 0, "x": 1},
        }
    )
    assert usage.server_tool_uses == {"web_search": 3}
    assert "server_tool_uses" not in usage.model_dump_json()
