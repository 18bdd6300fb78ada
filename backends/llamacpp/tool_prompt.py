"""How offered tools and past tool use reach a model through its chat template.

A tool-aware template (Qwen2.5, Hermes, Llama 3.1, Mistral) renders ``tools``, an assistant
message's ``tool_calls`` and ``role: tool`` results itself; it gets them as Hugging Face's
templates expect (arguments as objects, not JSON strings). What a template does not render,
as :func:`probe` finds once per model, is written as text in the model's tool-call
convention: the tools as a system-prompt block (Hermes style: the signatures in ``<tools>``
and how to call them), past calls as the text the model would have produced, and results
inside ``<tool_response>`` tags.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from backends.llamacpp.text import ChatTemplate
from backends.llamacpp.tool_parsers import ParserName
from gateway.protocol import ChatMessage

_PROBE_NAME = "zq_probe_function"
_PROBE_RESULT = "zq_probe_result"
_PROBE_ID = "zqprobe01"  # nine letters and digits, as Mistral templates insist

_INSTRUCTIONS: dict[ParserName, str] = {
    "hermes": (
        "For each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    ),
    "llama3_json": (
        'To call a function, respond with JSON in the format {"name": function name, '
        '"parameters": dictionary of argument name and its value}.'
    ),
    "mistral": (
        "To call functions, respond with [TOOL_CALLS] and a JSON list of calls:\n"
        '[TOOL_CALLS] [{"name": <function-name>, "arguments": <args-json-object>}]'
    ),
}


@dataclass(frozen=True)
class ToolSupport:
    """What of tool use a chat template renders."""

    tools: bool  # the ``tools`` it is given
    calls: bool  # an assistant message's ``tool_calls``
    results: bool  # a ``role: tool`` message's content


def probe(template: ChatTemplate) -> ToolSupport:
    """Render a made-up tool, call and result; what shows up is what the template renders."""
    tool = {
        "type": "function",
        "function": {
            "name": _PROBE_NAME,
            "description": "probe",
            "parameters": {"type": "object", "properties": {"zq": {"type": "integer"}}},
        },
    }
    offered = _rendered(template, [{"role": "user", "content": "hi"}], [tool])
    function = {"name": _PROBE_NAME, "arguments": {"zq": 1}}
    call = {"id": _PROBE_ID, "type": "function", "function": function}
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": _PROBE_ID, "content": _PROBE_RESULT},
    ]
    text = _rendered(template, history, None)
    return ToolSupport(_PROBE_NAME in offered, _PROBE_NAME in text, _PROBE_RESULT in text)


def _rendered(
    template: ChatTemplate, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> str:
    try:
        return template.render(messages, tools)
    except Exception:  # a template that refuses these messages does not render them
        return ""


class ToolPrompt:
    """Renders a chat request's messages, and the tools it offers, for one model whose
    tool-call convention is ``parser``."""

    def __init__(self, template: ChatTemplate, parser: ParserName) -> None:
        self._template = template
        self._parser = parser
        self.support = probe(template)

    def render(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]] | None, parallel: bool
    ) -> str:
        dicts = [self._message(m) for m in messages]
        if tools and not self.support.tools:
            dicts = _with_system_text(dicts, tool_block(tools, self._parser, parallel))
            tools = None
        return self._template.render(dicts, tools)

    def _message(self, message: ChatMessage) -> dict[str, Any]:
        out: dict[str, Any] = {"role": message.role, "content": message.text()}
        if message.name:
            out["name"] = message.name
        if message.tool_calls:
            calls = [
                (c.id, c.function.name, _arguments(c.function.arguments))
                for c in message.tool_calls
            ]
            if self.support.calls:
                out["tool_calls"] = [
                    {"id": self._id(i), "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in calls
                ]
            else:
                written = write_calls(self._parser, [(n, a) for _, n, a in calls])
                out["content"] = "\n".join(p for p in (out["content"], written) if p)
        if message.tool_call_id:
            out["tool_call_id"] = self._id(message.tool_call_id)
        if message.role == "tool" and not (self.support.tools and self.support.results):
            out["content"] = f"<tool_response>\n{out['content']}\n</tool_response>"
            if not self.support.results:
                out["role"] = "user"
        return out

    def _id(self, call_id: str) -> str:
        if self._parser != "mistral":
            return call_id
        # Mistral templates take nine letters and digits; the same id maps to the same nine
        return "".join(c for c in call_id if c.isalnum())[-9:].rjust(9, "0")


def tool_block(tools: list[dict[str, Any]], parser: ParserName, parallel: bool) -> str:
    """The system-prompt text that offers ``tools`` to a model whose template does not."""
    how_many = "one or more functions" if parallel else "at most one function"
    signatures = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        f"# Tools\n\nYou may call {how_many} to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{signatures}\n</tools>\n\n{_INSTRUCTIONS[parser]}"
    )


def write_calls(parser: ParserName, calls: list[tuple[str, Any]]) -> str:
    """Past calls (name, arguments) as the model would have written them."""
    if parser == "llama3_json":
        return "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in calls)
    if parser == "mistral":
        return "[TOOL_CALLS] " + json.dumps([{"name": n, "arguments": a} for n, a in calls])
    return "\n".join(
        f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls
    )


def _arguments(text: str) -> Any:
    """Arguments as an object, as templates expect; text that is not a JSON object as is."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def _with_system_text(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] in ("system", "developer"):
        first = messages[0]
        return [{**first, "content": f"{first['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]
