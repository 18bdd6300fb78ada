"""Which session a request belongs to: header, body id, or the conversation itself."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gateway.admission.sessions import SessionHint, claude_session, derived, session_of
from gateway.protocol import ChatCompletionRequest


def chat(*messages: dict[str, Any], model: str = "m") -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": model, "messages": list(messages)})


SYSTEM = {"role": "system", "content": "You are a coding agent."}
FIRST = {"role": "user", "content": "Fix the failing test."}


def test_a_multi_turn_conversation_without_an_id_is_one_session() -> None:
    first = chat(SYSTEM, FIRST)
    later = chat(
        SYSTEM,
        FIRST,
        {"role": "assistant", "content": "Looking."},
        {"role": "user", "content": "Go on."},
    )
    assert derived("key_a", first) == derived("key_a", later)
    assert derived("key_a", first).source == "derived"


def test_another_first_message_system_prompt_or_model_is_another_session() -> None:
    base = derived("key_a", chat(SYSTEM, FIRST))
    assert derived("key_a", chat(SYSTEM, {"role": "user", "content": "Other task."})) != base
    assert derived("key_a", chat({"role": "system", "content": "Other."}, FIRST)) != base
    assert derived("key_a", chat(SYSTEM, FIRST, model="other")) != base


def test_sessions_never_collide_across_keys() -> None:
    conversation = chat(SYSTEM, FIRST)
    assert derived("key_a", conversation).id != derived("key_b", conversation).id
    a = session_of("key_a", header="agent-1")
    b = session_of("key_b", header="agent-1")
    assert a is not None and b is not None
    assert a.id != b.id and a.scope != b.scope
    assert a.scope.startswith("session:key_a:")


def test_the_header_wins_over_the_body_and_the_body_over_the_conversation() -> None:
    conversation = chat(SYSTEM, FIRST)
    hint = SessionHint("prompt_cache_key", "cache-1")
    by_header = session_of("k", header="h-1", hint=hint, chat=conversation)
    by_hint = session_of("k", hint=hint, chat=conversation)
    by_chat = session_of("k", chat=conversation)
    assert by_header is not None and by_header.source == "header"
    assert by_header.label == "h-1"
    assert by_hint is not None and by_hint.source == "prompt_cache_key"
    assert by_chat == derived("k", conversation)
    assert session_of("k") is None


def test_the_same_id_in_a_header_or_a_body_field_is_one_session() -> None:
    header = session_of("k", header="conv-7")
    hint = session_of("k", hint=SessionHint("prompt_cache_key", "conv-7"))
    assert header is not None and hint is not None and header.id == hint.id


def test_a_continued_response_keeps_the_session_it_was_stored_with() -> None:
    resolved = SessionHint("previous_response_id", "agent-1", resolved="abc123")
    session = session_of("k", hint=resolved, chat=chat(FIRST))
    assert session is not None
    assert (session.id, session.label, session.source) == (
        "abc123",
        "agent-1",
        "previous_response_id",
    )


def test_long_ids_are_bounded_in_their_label_but_hashed_whole() -> None:
    one = session_of("k", header="x" * 5000)
    two = session_of("k", header="x" * 4999 + "y")
    assert one is not None and two is not None
    assert len(one.label) == 128 and one.id != two.id


def test_claude_code_session_in_metadata_user_id() -> None:
    uuid = "8f14e45f-ceea-467f-a2b4-1d2c3e4f5a6b"
    legacy = f"user_{'ab' * 32}_account_1c2d3e4f-0000-1111-2222-333344445555_session_{uuid}"
    assert claude_session(legacy) == uuid
    as_json = '{"device_id":"d1","account_uuid":"","session_id":"' + uuid + '"}'
    assert claude_session(as_json) == uuid
    assert claude_session("user_plain") is None
    assert claude_session("{not json") is None
    assert claude_session(None) is None


def test_a_derived_id_is_sha256_over_the_json_of_model_system_and_first_message() -> None:
    # the ids of earlier versions: a conversation keeps its session across an upgrade,
    # whatever its text holds (escapes, non-ASCII, a lone surrogate)
    for text in ("Fix it.", 'déjà "vu"\n\t\x01 \u2028 😀', "half \ud800 a pair"):
        request = chat(SYSTEM, {"role": "user", "content": text})
        parts = ["m", SYSTEM["content"], text]
        value = json.dumps(parts, ensure_ascii=False)
        data = "\0".join(("key_a", "derived", value)).encode("utf-8", "surrogatepass")
        assert derived("key_a", request).id == hashlib.sha256(data).hexdigest()[:32]


def test_a_long_part_is_named_by_its_length_and_ends() -> None:
    # an agent's long first message: one session across its turns, told apart from
    # another of the same size that starts or ends otherwise, and from a longer one
    long = "x" * 100_000
    first = derived("key_a", chat(SYSTEM, {"role": "user", "content": long}))
    later = chat(SYSTEM, {"role": "user", "content": long}, {"role": "assistant", "content": "ok"})
    assert derived("key_a", later) == first
    for other in ("y" + long[1:], long[:-1] + "y", long + "x"):
        assert derived("key_a", chat(SYSTEM, {"role": "user", "content": other})) != first
    # a long system prompt is read the same way
    long_system = {"role": "system", "content": long}
    assert derived("key_a", chat(long_system, FIRST)) != derived("key_a", chat(SYSTEM, FIRST))
