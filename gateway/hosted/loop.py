"""The chat side of the hosted-tool loop, whichever API asked: which of the model's calls
are the gateway's to run, and the next chat request once they have run.

A round is one model call. The model's calls of hosted tools run (each counted against the
request's bound); their results go back as ``tool`` messages and the model is called again
with ``tool_choice`` ``auto`` (a forced first call is not forced again). The loop ends when
the model calls none, calls a client tool, a call waits for approval, or the bound is
reached.
"""

from __future__ import annotations

from collections.abc import Container

from gateway.protocol import ChatCompletionRequest, ChatMessage, Usage
from gateway.protocol.chat import ToolCall


def split_calls(
    calls: list[ToolCall] | None, hosted: Container[str]
) -> tuple[list[ToolCall], list[ToolCall]]:
    """The model's calls of hosted tools, and the others (the client's)."""
    mine = [c for c in calls or () if c.function.name in hosted]
    theirs = [c for c in calls or () if c.function.name not in hosted]
    return mine, theirs


def continued(
    request: ChatCompletionRequest,
    said: str | None,
    results: list[tuple[ToolCall, str]],
) -> ChatCompletionRequest:
    """``request`` after the model said ``said`` and called the tools of ``results``,
    each answered with its text."""
    calls = [call for call, _ in results]
    messages = [
        *request.messages,
        ChatMessage(role="assistant", content=said or None, tool_calls=calls),
        *(ChatMessage(role="tool", tool_call_id=c.id, content=text) for c, text in results),
    ]
    return request.model_copy(update={"messages": messages, "tool_choice": "auto"})


def add_usage(spent: Usage | None, more: Usage | None) -> Usage | None:
    """The usage of two model calls together."""
    if spent is None or more is None:
        return more if spent is None else spent
    cached = _cached(spent) + _cached(more)
    return Usage.of(
        spent.prompt_tokens + more.prompt_tokens,
        spent.completion_tokens + more.completion_tokens,
        cached,
    )


def _cached(usage: Usage) -> int:
    details = usage.prompt_tokens_details
    return details.cached_tokens if details is not None else 0
