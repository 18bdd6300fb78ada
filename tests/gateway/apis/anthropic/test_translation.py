"""Messages → chat, directly: what maps, what a deployment's rules drop or refuse, and the
lenient reading routing uses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.apis.anthropic.translation import MessagesCall, to_chat
from gateway.errors import InvalidRequestError
from gateway.protocol.messages import MessagesRequest
from gateway.protocol.messages_codec import reasoning_effort


def request(**fields: Any) -> MessagesRequest:
    base: dict[str, Any] = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return MessagesRequest.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("thinking", "effort", "expected"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, None, "low"),
        ({"type": "enabled", "budget_tokens": 8000}, None, "medium"),
        ({"type": "enabled", "budget_tokens": 31999}, None, "high"),
        ({"type": "enabled", "budget_tokens": 1024}, "max", "high"),
        ({"type": "disabled"}, None, None),
        ({"type": "adaptive"}, "medium", "medium"),
        (None, None, None),
    ],
)
def test_thinking_becomes_a_reasoning_effort(
    thinking: dict[str, Any] | None, effort: str | None, expected: str | None
) -> None:
    assert reasoning_effort(thinking, effort) == expected
    fields: dict[str, Any] = {"thinking": thinking}
    if effort is not None:
        fields["output_config"] = {"effort": effort}
    chat, dropped = to_chat(request(**fields))
    assert chat.reasoning_effort == expected and dropped == []


def test_system_turns_stay_where_they_were() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "system", "content": [{"type": "text", "text": "now c"}]},
        {"role": "user", "content": "c"},
    ]
    chat, _ = to_chat(request(system="first", messages=messages))
    assert [(m.role, m.content) for m in chat.messages] == [
        ("system", "first"),
        ("user", "a"),
        ("assistant", "b"),
        ("system", "now c"),
        ("user", "c"),
    ]


def test_unknown_fields_are_refused_by_name_or_dropped_by_the_rules() -> None:
    body = request(container="c_1", metadata={"user_id": "u"})
    with pytest.raises(InvalidRequestError) as refused:
        to_chat(body, drops=frozenset({"metadata"}))
    assert refused.value.param == "container"
    chat, dropped = to_chat(body, drops=frozenset({"metadata", "container"}))
    assert dropped == ["container", "metadata"] and chat.user is None


def test_routing_reads_what_no_chat_upstream_could_take() -> None:
    pdf = {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}
    messages = [{"role": "user", "content": [pdf, {"type": "text", "text": "summarise"}]}]
    tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]
    body = request(messages=messages, tools=tools)
    with pytest.raises(InvalidRequestError):
        to_chat(body)
    chat, dropped = to_chat(body, lenient=True)
    assert chat.tools is None and "server_tools" in dropped
    assert "summarise" in chat.messages[0].text()


def test_routing_reads_even_what_is_malformed_for_chat() -> None:
    use = {"type": "tool_use", "name": "x", "input": {}}  # no id: the upstream will say
    call = MessagesCall.read(
        json.dumps(
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "assistant", "content": [use]}],
                "tool_choice": {"type": "tool", "name": "web_search"},
            }
        ).encode(),
        {},
    )
    routed = call.routed()
    assert routed.max_tokens == 5 and '"tool_use"' in routed.messages[0].text()


def test_a_pdf_document_is_a_file_named_by_its_title() -> None:
    source = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}
    pdf = {"type": "document", "source": source, "title": "q3.pdf"}
    with pytest.raises(InvalidRequestError) as refused:  # a deployment that reads no files
        to_chat(request(messages=[{"role": "user", "content": [pdf]}]))
    assert refused.value.param == "messages[0].content[0].type"
    chat, dropped = to_chat(request(messages=[{"role": "user", "content": [pdf]}]), files=True)
    (part,) = chat.model_dump(exclude_none=True)["messages"][0]["content"]
    assert part == {
        "type": "file",
        "file": {"file_data": "data:application/pdf;base64,JVBERi0xLjQK", "filename": "q3.pdf"},
    }
    assert dropped == []


def test_a_text_document_is_text_and_cache_hints_become_a_cache_key() -> None:
    doc = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
    }
    hint = {"type": "ephemeral"}
    messages = [
        {"role": "user", "content": [doc, {"type": "text", "text": "?", "cache_control": hint}]}
    ]
    chat, dropped = to_chat(request(messages=messages))
    assert chat.messages[0].content == "notes\n\n?" and dropped == []  # two paragraphs
    again, _ = to_chat(request(messages=[*messages, {"role": "assistant", "content": "x"}]))
    assert chat.prompt_cache_key is not None and chat.prompt_cache_key == again.prompt_cache_key


def test_a_pdf_read_by_a_tool_follows_its_tool_message() -> None:
    source = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "the file"}, {"type": "document", "source": source}],
    }
    use = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.pdf"}}
    messages = [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
    ]
    chat, dropped = to_chat(request(messages=messages), files=True)
    sent = chat.model_dump(exclude_none=True)["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[2]["content"] == "the file"
    assert sent[3]["content"] == [
        {
            "type": "file",
            "file": {
                "file_data": "data:application/pdf;base64,JVBERi0xLjQK",
                "filename": "document.pdf",
            },
        }
    ]
    assert dropped == []
