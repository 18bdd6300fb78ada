"""The requests Claude Code and Codex really send (``tests/fixtures/agents``) fall into one
session per conversation: by their session header, by their body's id without it, and by
the conversation itself without either; Codex's repeated tool call is what the loop guard
reads."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.admission.sessions import SessionId, session_header, session_of
from gateway.apis.anthropic.codec import session_hint as message_session_hint
from gateway.apis.anthropic.translation import MessagesCall
from gateway.apis.responses.codec import read
from gateway.apis.responses.codec import session_hint as response_session_hint
from gateway.apis.responses.tools import tool_map
from gateway.apis.responses.translation import ResponsesCall, to_chat
from gateway.protocol.repeats import repeated_tool_call

AGENTS = Path(__file__).parents[2] / "fixtures" / "agents"
KEY = "key_agents"


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((AGENTS / name).read_text())
    return data


def claude_session(request: dict[str, Any], headers: bool = True) -> SessionId | None:
    call = MessagesCall.read(json.dumps(request["body"]).encode(), {})
    hint = message_session_hint(call)
    header = session_header(header_map(request)) if headers else None
    return session_of(KEY, header=header, hint=hint, chat=call.routed())


def codex_call(body: dict[str, Any]) -> ResponsesCall:
    call = read(json.dumps(body).encode())
    call.tools = tool_map(call.body.tools, call.body.input, "drop")
    call.chat, call.turn, _ = to_chat(call.body, [], call.tools)
    return call


def codex_session(request: dict[str, Any], headers: bool = True) -> SessionId | None:
    call = codex_call(request["body"])
    header = session_header(header_map(request)) if headers else None
    return session_of(KEY, header=header, hint=response_session_hint(call), chat=call.chat)


def header_map(request: dict[str, Any]) -> dict[str, str]:
    """A recorded request's headers, by lower-case name."""
    return {k.lower(): v for k, v in request["headers"].items()}


@pytest.mark.parametrize(
    ("agent", "session", "body_source"),
    [
        ("claude-code-messages", claude_session, "metadata.user_id"),
        ("codex-responses", codex_session, "prompt_cache_key"),
    ],
)
def test_both_turns_of_an_agent_are_one_session(agent: str, session: Any, body_source: str) -> None:
    one, two = recorded(f"{agent}-turn1.json"), recorded(f"{agent}-turn2.json")
    by_header = [session(one), session(two)]
    assert by_header[0] is not None and by_header[0].source == "header"
    assert by_header[0] == by_header[1]
    by_body = [session(one, headers=False), session(two, headers=False)]
    assert by_body[0] is not None and by_body[0].source == body_source
    assert by_body[0] == by_body[1]
    for request in (one, two):  # no ids at all: the conversation's start
        request["body"].pop("prompt_cache_key", None)
        request["body"].pop("metadata", None)
    derived = [session(one, headers=False), session(two, headers=False)]
    assert derived[0] is not None and derived[0].source == "derived"
    assert derived[0] == derived[1]


def test_codex_repeating_its_exec_call_is_what_the_loop_guard_reads() -> None:
    body = recorded("codex-responses-turn2.json")["body"]
    items = body["input"]
    call_at = next(i for i, item in enumerate(items) if item.get("type") == "custom_tool_call")
    pair = items[call_at : call_at + 2]
    assert pair[1]["type"] == "custom_tool_call_output"
    repeated = copy.deepcopy(body)
    repeated["input"] = items[:call_at] + [copy.deepcopy(item) for _ in range(4) for item in pair]
    once = repeated_tool_call(codex_call(body).chat_request().messages)
    four = repeated_tool_call(codex_call(repeated).chat_request().messages)
    assert once is not None and once.count == 1
    assert four is not None and (four.name, four.count) == (once.name, 4)
