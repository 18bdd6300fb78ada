"""The loop guard's reading of a request: how many times in a row, at the end of the
conversation the client sent, the assistant made the same tool call.

Agents resend the whole conversation each turn, so the request itself shows a loop; no
state is needed and nothing can drift. Chat's assistant ``tool_calls``, Responses'
``function_call`` items and Messages' ``tool_use`` blocks all reach admission as chat
messages, so one reading serves every API. A turn's calls count as one step (name and
arguments, the arguments' JSON in canonical form, in order); tool results between steps
are skipped; a user turn, or an assistant turn without calls, ends the run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.protocol import ChatMessage

MAX_SCANNED = 1000  # assistant turns looked at, from the end: a bound on the work


@dataclass(frozen=True)
class ToolRepeat:
    """The call repeated at the end of a conversation (its first tool's name) and how
    many times in a row."""

    name: str
    count: int


def repeated_tool_call(messages: Sequence[ChatMessage]) -> ToolRepeat | None:
    """The tool call the conversation ends repeating, or ``None`` when it does not end
    with a tool call."""
    last: tuple[tuple[str, str], ...] | None = None
    count = 0
    scanned = 0
    for message in reversed(messages):
        if message.role in ("tool", "function"):
            continue
        if message.role != "assistant" or not message.tool_calls or scanned >= MAX_SCANNED:
            break
        scanned += 1
        step = tuple((c.function.name, canonical(c.function.arguments)) for c in message.tool_calls)
        if last is not None and step != last:
            break
        last, count = step, count + 1
    if last is None:
        return None
    return ToolRepeat(last[0][0], count)


def canonical(arguments: str | None) -> str:
    """Tool arguments as canonical JSON (keys sorted, no spaces), or the text as sent when
    it is not JSON."""
    if not arguments:
        return ""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments.strip()
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
