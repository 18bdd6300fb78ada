"""The loop guard's reading of a request: how many times in a row, at the end of the
conversation the client sent, the assistant made the same tool call.

Agents resend the whole conversation each turn, so the request itself shows a loop; no
state is needed and nothing can drift. Chat's assistant ``tool_calls``, Responses'
``function_call`` items and Messages' ``tool_use`` blocks all reach admission as chat
messages, so one reading serves every API. A turn's calls count as one step (name and
arguments, the arguments' JSON in canonical form: keys sorted, ``1.0`` read as ``1``, in
order); tool results between steps are skipped; a user turn, or an assistant turn without
calls, ends the run. A run is one step repeated, or a short cycle of steps (``A, B, A, B``:
up to :data:`MAX_PERIOD` steps) repeated; its count is how many times the cycle came round.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.protocol import ChatMessage

MAX_SCANNED = 1000  # assistant turns looked at, from the end: a bound on the work
MAX_PERIOD = 3
"""The longest cycle of steps the guard recognises (``A, B, C, A, B, C``)."""

Step = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ToolRepeat:
    """The call repeated at the end of a conversation (its first tool's name; for a cycle,
    the tools of its steps in order, comma-separated) and how many times in a row."""

    name: str
    count: int


def repeated_tool_call(messages: Sequence[ChatMessage]) -> ToolRepeat | None:
    """The tool call (or short cycle of calls) the conversation ends repeating, or ``None``
    when it does not end with a tool call."""
    steps = _steps(messages)
    if not steps:
        return None
    best: ToolRepeat | None = None
    for period in range(1, min(MAX_PERIOD, len(steps)) + 1):
        run = period
        while run < len(steps) and steps[run] == steps[run - period]:
            run += 1
        cycles = run // period
        if cycles < 2 and period > 1:
            continue
        if best is None or cycles > best.count:
            names = ", ".join(step[0][0] for step in reversed(steps[:period]))
            best = ToolRepeat(names, cycles)
    return best


def _steps(messages: Sequence[ChatMessage]) -> list[Step]:
    """The conversation's closing run of tool-calling turns, newest first."""
    steps: list[Step] = []
    for message in reversed(messages):
        if message.role in ("tool", "function"):
            continue
        if message.role != "assistant" or not message.tool_calls or len(steps) >= MAX_SCANNED:
            break
        steps.append(
            tuple((c.function.name, canonical(c.function.arguments)) for c in message.tool_calls)
        )
    return steps


def canonical(arguments: str | None) -> str:
    """Tool arguments as canonical JSON (keys sorted, no spaces, a whole number written
    as an integer: ``1.0`` is ``1``), or the text as sent when it is not JSON."""
    if not arguments:
        return ""
    try:
        value = json.loads(arguments, parse_float=_number)
    except ValueError:
        return arguments.strip()
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _number(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() else value
