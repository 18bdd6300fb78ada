"""The APIs a load test can drive, and how each one's requests and answers read.

``chat`` (``/v1/chat/completions``, the default), ``responses`` (``/v1/responses``, sent
with ``store: false``) and ``messages`` (Anthropic's ``/v1/messages``, the key also sent as
``x-api-key``). For each: the request path and body, what in a streamed event is generated
output, whether an event ends the stream or reports a failure, and where the usage is.
"""

from __future__ import annotations

from typing import Any, Literal

Api = Literal["chat", "responses", "messages"]
APIS: tuple[Api, ...] = ("chat", "responses", "messages")
PATHS: dict[Api, str] = {
    "chat": "/chat/completions",
    "responses": "/responses",
    "messages": "/messages",
}
_OUTPUT_EVENTS = {
    "response.output_text.delta",
    "response.function_call_arguments.delta",
    "response.reasoning_text.delta",
}


def body(
    api: Api, model: str, messages: list[dict[str, Any]], max_tokens: int, stream: bool
) -> dict[str, Any]:
    """The JSON body of one request for ``messages`` (chat messages) on ``api``."""
    if api == "responses":
        return {
            "model": model,
            "input": messages,
            "max_output_tokens": max_tokens,
            "stream": stream,
            "store": False,
        }
    if api == "messages":
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        turns = [m for m in messages if m["role"] != "system"]
        out: dict[str, Any] = {
            "model": model,
            "messages": turns,
            "max_tokens": max_tokens,
            "stream": stream,
        }
        if system:
            out["system"] = system
        return out
    out = {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": stream}
    if stream:
        out["stream_options"] = {"include_usage": True}
    return out


def headers(api: Api, api_key: str | None) -> dict[str, str]:
    """Request headers: the key as a bearer token (and as ``x-api-key`` for Messages)."""
    out = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if api == "messages":
        out["anthropic-version"] = "2023-06-01"
        if api_key:
            out["x-api-key"] = api_key
    return out


def has_output(api: Api, event: dict[str, Any]) -> bool:
    """Whether a streamed event carries generated output (text, reasoning, tool arguments)."""
    if api == "responses":
        return event.get("type") in _OUTPUT_EVENTS and bool(event.get("delta"))
    if api == "messages":
        if event.get("type") != "content_block_delta":
            return False
        delta = event.get("delta") or {}
        return any(delta.get(k) for k in ("text", "partial_json", "thinking"))
    for choice in event.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta") or {}
        if any(delta.get(k) for k in ("content", "reasoning_content", "reasoning", "tool_calls")):
            return True
    return False


def ends(api: Api, event: dict[str, Any]) -> bool:
    """Whether an event is the last of a complete stream (chat ends with ``[DONE]``)."""
    if api == "responses":
        return event.get("type") in ("response.completed", "response.incomplete")
    if api == "messages":
        return event.get("type") == "message_stop"
    return False


def failure(api: Api, event: dict[str, Any]) -> Any:
    """What went wrong, if the event reports a failure; else ``None``."""
    if api == "chat":
        return event.get("error")
    if event.get("type") in ("error", "response.failed"):
        return event.get("error") or event.get("message") or event
    return None


def usage(api: Api, event: dict[str, Any]) -> tuple[int | None, int | None]:
    """``(prompt, output)`` tokens an event or whole answer reports (``None``: not here)."""
    if api == "responses":
        found = (event.get("response") or event).get("usage")
        keys = ("input_tokens", "output_tokens")
    elif api == "messages":
        found = (event.get("message") or event).get("usage")
        keys = ("input_tokens", "output_tokens")
    else:
        found = event.get("usage")
        keys = ("prompt_tokens", "completion_tokens")
    if not isinstance(found, dict):
        return None, None
    prompt, output = found.get(keys[0]), found.get(keys[1])
    return (
        prompt if isinstance(prompt, int) else None,
        output if isinstance(output, int) else None,
    )


def output_words(api: Api, answer: dict[str, Any]) -> int | None:
    """Whitespace-separated words of a whole answer's text (``None``: no answer in it)."""
    if api == "responses":
        output = answer.get("output")
        if not isinstance(output, list):
            return None
        texts = [
            part.get("text", "")
            for item in output
            if isinstance(item, dict)
            for part in item.get("content") or []
            if isinstance(part, dict)
        ]
    elif api == "messages":
        content = answer.get("content")
        if not isinstance(content, list):
            return None
        texts = [b.get("text", "") for b in content if isinstance(b, dict)]
    else:
        choices = answer.get("choices")
        if not choices:
            return None
        texts = [str((choices[0].get("message") or {}).get("content") or "")]
    return len(" ".join(texts).split())
