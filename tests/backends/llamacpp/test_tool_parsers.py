"""Tool-call readers and tool prompts (backends/llamacpp/tool_parsers.py, tool_prompt.py),
on the published chat templates of Qwen2.5, Llama 3.1 and Mistral v0.3."""

from __future__ import annotations

import json
from typing import Any

import pytest

from backends.llamacpp.text import ChatTemplate
from backends.llamacpp.tool_parsers import (
    CallArgs,
    CallArrayReader,
    CallStart,
    Output,
    ParserName,
    Text,
    ToolReader,
    auto_reader,
    detect_parser,
    read_all,
)
from backends.llamacpp.tool_prompt import ToolPrompt, ToolSupport, probe
from gateway.models.demo import CHATML_TEMPLATE
from gateway.protocol import ChatMessage
from tests.backends.llamacpp.chat_templates import LLAMA31, MISTRAL_V03, QWEN25, SMOLLM2

NAMES = frozenset({"get_weather", "get_time"})
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}},
        },
    },
]
Calls = list[tuple[str, dict[str, Any]]]


def parse(parser: ParserName, text: str, max_calls: int | None = None) -> tuple[str | None, Calls]:
    content, calls = read_all(auto_reader(parser, NAMES, max_calls), text)
    return content, [(name, json.loads(arguments)) for name, arguments in calls]


def fed_in_pieces(reader: ToolReader, text: str, size: int) -> tuple[str | None, Calls]:
    events: list[Output] = []
    for at in range(0, len(text), size):
        events += reader.feed(text[at : at + size])
    events += reader.finish()
    return _assemble(events)


def _assemble(events: list[Output]) -> tuple[str | None, Calls]:
    content = "".join(e.text for e in events if isinstance(e, Text)) or None
    calls: list[tuple[str, str]] = []
    for event in events:
        if isinstance(event, CallStart):
            assert event.index == len(calls)
            calls.append((event.name, ""))
        elif isinstance(event, CallArgs):
            name, arguments = calls[event.index]
            calls[event.index] = (name, arguments + event.piece)
    return content, [(name, json.loads(arguments)) for name, arguments in calls]


PARIS = ("get_weather", {"city": "Paris"})
TOKYO = ("get_time", {"timezone": "Asia/Tokyo"})

# What models write in each convention: (parser, output, content, calls)
CASES: list[tuple[ParserName, str, str | None, Calls]] = [
    # Hermes / Qwen2.5
    (
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        None,
        [PARIS],
    ),
    (
        "hermes",
        "Let me look that up.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}\n'
        "</tool_call>",
        "Let me look that up.",
        [PARIS, TOKYO],
    ),
    (  # SmolLM2's training format: a list inside one tag
        "hermes",
        '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}]</tool_call>',
        None,
        [PARIS, TOKYO],
    ),
    (  # stopped before the closing tag
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}',
        None,
        [PARIS],
    ),
    (  # arguments written as a JSON string
        "hermes",
        '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}</tool_call>',
        None,
        [PARIS],
    ),
    (  # malformed JSON: text, as written
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par}\n</tool_call>',
        [],
    ),
    (  # a tool that was not offered: text
        "hermes",
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
        [],
    ),
    ("hermes", "Paris is sunny <tool>s aside.\n", "Paris is sunny <tool>s aside.\n", []),
    # Llama 3.1 JSON
    (
        "llama3_json",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        None,
        [PARIS],
    ),
    (
        "llama3_json",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
        '{"name": "get_time", "parameters": {"timezone": "Asia/Tokyo"}}',
        None,
        [PARIS, TOKYO],
    ),
    (
        "llama3_json",
        'I will check. <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
        "I will check.",
        [PARIS],
    ),
    ("llama3_json", '{"answer": 42} is JSON', '{"answer": 42} is JSON', []),
    ("llama3_json", "Use {braces} freely.", "Use {braces} freely.", []),
    (
        "llama3_json",
        '{"name": "get_weather", "parameters": {"city": "Pa',
        '{"name": "get_weather", "parameters": {"city": "Pa',
        [],
    ),
    # Mistral
    (
        "mistral",
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}]',
        None,
        [PARIS, TOKYO],
    ),
    (
        "mistral",
        'Checking.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, '
        '"id": "a1b2c3d4e"}]',
        "Checking.",
        [PARIS],
    ),
    (
        "mistral",
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}',
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}',
        [],
    ),
    ("mistral", "[TOOL_CALLS] no call here", "[TOOL_CALLS] no call here", []),
]


@pytest.mark.parametrize(("parser", "output", "content", "calls"), CASES)
def test_model_output_is_read_into_content_and_calls(
    parser: ParserName, output: str, content: str | None, calls: Calls
) -> None:
    assert parse(parser, output) == (content, calls)


@pytest.mark.parametrize(("parser", "output", "content", "calls"), CASES)
@pytest.mark.parametrize("size", [1, 2, 5])
def test_streamed_output_reads_as_the_whole(
    parser: ParserName, output: str, content: str | None, calls: Calls, size: int
) -> None:
    assert fed_in_pieces(auto_reader(parser, NAMES, None), output, size) == (content, calls)


def test_possible_tag_is_held_back_then_released() -> None:
    reader = auto_reader("hermes", NAMES, None)
    assert reader.feed("Sunny in <tool") == [Text("Sunny in")]  # " <tool" may open a call
    assert reader.feed("s we trust") == [Text(" <tools we trust")]
    assert reader.feed('<tool_call>{"name": "get_weather", ') == []
    assert reader.feed('"arguments": {"city": "Paris"}}</tool_call>') == [
        CallStart(0, "get_weather"),
        CallArgs(0, '{"city": "Paris"}'),
    ]
    assert reader.finish() == []


def test_one_call_at_most_without_parallel_calls() -> None:
    two = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' * 2
    assert parse("hermes", two, max_calls=1) == (None, [PARIS])


def test_the_required_form_streams_arguments_as_they_come() -> None:
    output = (
        '[{"name": "get_weather", "arguments": {"city": "Pa\\"ris {x}", "n": [1, {"y": 2}]}}, '
        '{"name": "get_time", "arguments": {}}]'
    )
    reader = CallArrayReader()
    events = [e for char in output for e in reader.feed(char)]
    assert events[0] == CallStart(0, "get_weather")
    assert sum(isinstance(e, CallArgs) for e in events) > 10  # piece by piece
    assert _assemble(events) == (
        None,
        [("get_weather", {"city": 'Pa"ris {x}', "n": [1, {"y": 2}]}), ("get_time", {})],
    )


# chat templates ---------------------------------------------------------------------------

TEMPLATES = {"qwen2.5": QWEN25, "llama3.1": LLAMA31, "mistral-v0.3": MISTRAL_V03}


@pytest.mark.parametrize(
    ("source", "parser", "support"),
    [
        (QWEN25, "hermes", ToolSupport(True, True, True)),
        (LLAMA31, "llama3_json", ToolSupport(True, True, True)),
        (MISTRAL_V03, "mistral", ToolSupport(True, True, True)),
        (SMOLLM2, "hermes", ToolSupport(False, False, True)),
        (CHATML_TEMPLATE, "hermes", ToolSupport(False, True, True)),
    ],
    ids=["qwen2.5", "llama3.1", "mistral-v0.3", "smollm2", "demo"],
)
def test_the_convention_and_support_are_read_from_the_template(
    source: str, parser: ParserName, support: ToolSupport
) -> None:
    assert detect_parser(source) == parser
    assert probe(_template(source)) == support


def _template(source: str) -> ChatTemplate:
    return ChatTemplate(source, bos_token="<s>", eos_token="</s>")


def _history(arguments: str = '{"city": "Paris"}') -> list[ChatMessage]:
    function = {"name": "get_weather", "arguments": arguments}
    call = {"id": "call_Xy12Ab34Cd56Ef78Gh90Ij12", "type": "function", "function": function}
    return [
        ChatMessage.model_validate(m)
        for m in (
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "18 C, sunny"},
        )
    ]


# where each template writes the assistant's turn: the text the model itself produced
ASSISTANT_TURN = {
    "qwen2.5": ("<|im_start|>assistant\n", "<|im_end|>"),
    "llama3.1": ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
    "mistral-v0.3": ("[/INST]", "</s>"),
}


@pytest.mark.parametrize("name", TEMPLATES)
def test_a_past_call_as_the_template_writes_it_reads_back(name: str) -> None:
    source = TEMPLATES[name]
    parser = detect_parser(source)
    prompt = ToolPrompt(_template(source), parser).render(_history(), TOOLS, parallel=True)
    opening, closing = ASSISTANT_TURN[name]
    turn = prompt.split(opening)[1].split(closing)[0]
    assert parse(parser, turn) == (None, [PARIS])
    assert "18 C, sunny" in prompt
    assert '"city": "Paris"' in prompt  # arguments as an object, not a quoted string
    assert "get_time" in prompt  # the tools, rendered by the template itself
    if name == "mistral-v0.3":  # nine-character ids, the same for the call and its result
        assert '"id": "8Gh90Ij12"' in prompt and '"call_id": "8Gh90Ij12"' in prompt


def test_a_template_without_tools_gets_a_tool_block_and_written_history() -> None:
    prompt = ToolPrompt(_template(SMOLLM2), "hermes").render(_history(), TOOLS, parallel=True)
    system = prompt.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert json.dumps(TOOLS[1]) in system
    assert "<tool_call></tool_call> XML tags" in system
    assert "one or more functions" in system
    assistant = prompt.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert parse("hermes", assistant) == (None, [PARIS])
    assert "<|im_start|>tool\n<tool_response>\n18 C, sunny\n</tool_response><|im_end|>" in prompt
    single = ToolPrompt(_template(SMOLLM2), "hermes").render(_history(), TOOLS, parallel=False)
    assert "at most one function" in single


def test_no_tools_offered_means_no_tool_block() -> None:
    prompt = ToolPrompt(_template(SMOLLM2), "hermes").render(_history()[1:2], None, True)
    assert "<tools>" not in prompt
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_arguments_that_are_not_json_are_rendered_as_given() -> None:
    prompt = ToolPrompt(_template(QWEN25), "hermes").render(_history("not json"), TOOLS, True)
    assert '"arguments": "not json"' in prompt
