"""The loop guard's reading: identical tool calls in a row at the end of a conversation."""

from __future__ import annotations

import json
from typing import Any

from gateway.protocol import ChatCompletionRequest, ChatMessage
from gateway.protocol.repeats import canonical, repeated_tool_call


def call(name: str, arguments: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """An assistant turn calling ``name`` and the tool's answer."""
    call_id = f"call_{n}"
    function = {"name": name, "arguments": json.dumps(arguments)}
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "same output"},
    ]


def messages(*turns: list[dict[str, Any]] | dict[str, Any]) -> list[ChatMessage]:
    flat: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn in turns:
        flat.extend(turn if isinstance(turn, list) else [turn])
    body = ChatCompletionRequest.model_validate({"model": "m", "messages": flat})
    return body.messages


def test_counts_identical_consecutive_calls_at_the_end() -> None:
    history = messages(*(call("read_file", {"path": "a.py"}, i) for i in range(4)))
    repeat = repeated_tool_call(history)
    assert repeat is not None and (repeat.name, repeat.count) == ("read_file", 4)


def test_arguments_compare_in_canonical_form() -> None:
    turns = [call("grep", {"q": "x", "path": "."}, 0), call("grep", {"path": ".", "q": "x"}, 1)]
    repeat = repeated_tool_call(messages(*turns))
    assert repeat is not None and repeat.count == 2
    assert canonical('{"b": 1, "a": [1, 2]}') == '{"a":[1,2],"b":1}'
    assert canonical("not json ") == "not json"


def test_other_arguments_or_another_tool_end_the_run() -> None:
    turns = [
        call("read_file", {"path": "a.py"}, 0),
        call("read_file", {"path": "b.py"}, 1),
        call("read_file", {"path": "b.py"}, 2),
    ]
    repeat = repeated_tool_call(messages(*turns))
    assert repeat is not None and repeat.count == 2


def test_a_user_turn_or_a_text_answer_ends_the_run() -> None:
    same = [call("ls", {}, i) for i in range(3)]
    user = {"role": "user", "content": "try something else"}
    assert repeated_tool_call(messages(*same, user)) is None
    answer = {"role": "assistant", "content": "done"}
    assert repeated_tool_call(messages(*same, answer)) is None
    after_user = repeated_tool_call(messages(*same, user, call("ls", {}, 9)))
    assert after_user is not None and after_user.count == 1


def test_no_tool_calls_no_repeat() -> None:
    assert repeated_tool_call(messages({"role": "assistant", "content": "hi"})) is None
    assert repeated_tool_call(messages()) is None


def test_whole_numbers_compare_equal_however_written() -> None:
    turns = [call("seek", {"line": 1}, 0), call("seek", {"line": 1.0}, 1)]
    repeat = repeated_tool_call(messages(*turns))
    assert repeat is not None and repeat.count == 2
    assert canonical('{"n": 1.0, "m": 2.5, "k": 1e2}') == '{"k":100,"m":2.5,"n":1}'


def test_a_short_cycle_of_calls_counts_its_rounds() -> None:
    cycle = [("read_file", {"path": "a.py"}), ("run_tests", {"all": True})]
    turns = [call(*cycle[i % 2], i) for i in range(8)]
    repeat = repeated_tool_call(messages(*turns))
    assert repeat is not None and (repeat.name, repeat.count) == ("read_file, run_tests", 4)
    three = [("a", {}), ("b", {}), ("c", {"x": 1})]
    repeat = repeated_tool_call(messages(*(call(*three[i % 3], i) for i in range(9))))
    assert repeat is not None and (repeat.name, repeat.count) == ("a, b, c", 3)


def test_a_cycle_longer_than_three_steps_is_not_a_loop() -> None:
    four = [("a", {}), ("b", {}), ("c", {}), ("d", {})]
    repeat = repeated_tool_call(messages(*(call(*four[i % 4], i) for i in range(12))))
    assert repeat is not None and repeat.count == 1
