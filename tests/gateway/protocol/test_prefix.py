"""Prefix chains: equal content up to a link gives the same link, on both sides of a wire."""

from __future__ import annotations

import json
from typing import Any

from gateway.protocol import ChatCompletionRequest
from gateway.protocol.prefix import BLOCK_CHARS, MAX_LINKS, prefix_chain

SYSTEM = "You are a careful coding agent. " * 100  # 3,200 characters: 4 links


def chat(*messages: dict[str, Any], **extra: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": list(messages), **extra})


def system() -> dict[str, Any]:
    return {"role": "system", "content": SYSTEM}


def test_a_follow_up_turn_extends_the_chain_of_the_turn_before() -> None:
    first = prefix_chain(chat(system(), {"role": "user", "content": "list the files"}))
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    second = prefix_chain(
        chat(
            system(),
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"},
        )
    )
    assert second[: len(first)] == first
    assert len(second) == len(first) + 2
    assert [chars for _, chars in second] == sorted(chars for _, chars in second)


def test_long_content_is_cut_into_blocks_and_sessions_share_the_system_prompt() -> None:
    one = prefix_chain(chat(system(), {"role": "user", "content": "task one"}))
    two = prefix_chain(chat(system(), {"role": "user", "content": "task two"}))
    system_links = -(-(len("system") + 2 + len(SYSTEM)) // BLOCK_CHARS)
    assert len(one) == system_links + 1
    assert one[:system_links] == two[:system_links] and one[-1] != two[-1]
    assert one[system_links - 1][1] == len("system") + 2 + len(SYSTEM)


def test_tools_and_roles_are_part_of_the_content() -> None:
    user = {"role": "user", "content": "hi"}
    tool = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}
    plain = prefix_chain(chat(system(), user))
    with_tools = prefix_chain(chat(system(), user, tools=[tool]))
    assert not set(plain) & set(with_tools)
    as_developer = prefix_chain(chat({"role": "developer", "content": SYSTEM}, user))
    assert as_developer[0] != plain[0]
    assert prefix_chain(chat(system(), user, temperature=0.2, max_tokens=5)) == plain


def test_the_chain_survives_the_wire_to_a_worker() -> None:
    """A gateway sends the request on as JSON; the worker's chain must be the gateway's."""
    tool = {"type": "function", "function": {"name": "ls", "description": "list"}}
    parts = [{"type": "text", "text": "look "}, {"type": "text", "text": "here"}]
    request = chat(system(), {"role": "user", "content": parts}, tools=[tool])
    again = ChatCompletionRequest.model_validate_json(request.model_dump_json(exclude_none=True))
    assert prefix_chain(again) == prefix_chain(request)


def test_a_huge_request_has_a_bounded_chain_whose_last_link_covers_it_all() -> None:
    text = "x" * (BLOCK_CHARS * (MAX_LINKS + 10))
    chain = prefix_chain(chat({"role": "user", "content": text}))
    assert len(chain) == MAX_LINKS
    assert chain[-1][1] == len("user") + 2 + len(text)
    assert prefix_chain(chat({"role": "user", "content": text + "y"}))[-1] != chain[-1]


def test_a_lone_surrogate_is_hashed_not_refused() -> None:
    body = json.loads('{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}')
    request = ChatCompletionRequest.model_validate(body)
    assert len(prefix_chain(request)) == 1
