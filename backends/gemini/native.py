"""Gemini's API as it is: the pass-through behind a client that speaks Gemini itself.

The request goes up as the client wrote it (a ``model`` member, which the URL makes
redundant, set to the deployment's), and the answer or the stream's events come back byte
for byte. One change is made where Gemini 3 would otherwise refuse the request: a function
call of the current turn that another model made (a fallback answered that turn) carries
no thought signature, so the deployment's ``missing_signature`` is set on it, as the chat
path sets it (:func:`signed`). Only what the gateway itself needs is read on the way: the
usage (the last ``usageMetadata``), errors sent as events (mapped as the chat path maps
them) and the end (an event with a ``finishReason``; Gemini's stream has no end marker,
so a body that ends before one is cut).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from backends.gemini.answer import chat_usage
from backends.http.errors import cut_error, protocol_error
from backends.http.jsonbody import encode_json, load_json
from backends.http.sse import FrameBatches, parse_event
from gateway.errors import GatewayError
from gateway.protocol import Usage
from gateway.protocol.rawbody import RawBody

_CALL = ("functionCall", "function_call")
_RESPONSE = ("functionResponse", "function_response")
_SIGNATURE = ("thoughtSignature", "thought_signature")
GENERATE_FIELDS = frozenset({"contents", "model"})
"""The members a ``countTokens`` body shares with a ``generateContent`` one; any other
(``systemInstruction``, ``tools``...) makes a body a ``generateContent`` request."""


def as_sent(body: bytes, model: str, missing: str | None = None) -> bytes:
    """``body`` byte for byte, but for a ``model`` member, set to ``models/<model>``, and
    the current turn's ``contents`` when a call there needs the signature ``missing``."""
    raw = RawBody.read(body)
    changes: dict[str, Any] = {}
    name = f"models/{model}"
    if "model" in raw.data and raw.data["model"] != name:
        changes["model"] = name
    contents = signed(raw.data.get("contents"), missing) if missing is not None else None
    if contents is not None:
        changes["contents"] = contents
    return raw.spliced(changes) if changes else body


def signed(contents: Any, missing: str) -> list[Any] | None:
    """``contents`` with ``missing`` as the ``thoughtSignature`` of each model turn's
    first ``functionCall`` part that has none, in the current turn (after the last user
    turn that is more than function responses: what Gemini 3 checks); ``None`` when
    nothing lacks one."""
    if not isinstance(contents, list):
        return None
    out, changed = list(contents), False
    for i in range(_current_turn(contents), len(contents)):
        content = contents[i]
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        parts = _listed(content.get("parts"))
        calls = [j for j, p in enumerate(parts) if _has(p, _CALL)]
        if not calls or _has(parts[calls[0]], _SIGNATURE):
            continue
        j = calls[0]
        first = {**parts[j], "thoughtSignature": missing}
        out[i] = {**content, "parts": [*parts[:j], first, *parts[j + 1 :]]}
        changed = True
    return out if changed else None


def _current_turn(contents: list[Any]) -> int:
    """Where the current turn starts: after the last user turn with a part that is not a
    ``functionResponse``."""
    start = 0
    for i, content in enumerate(contents):
        if not isinstance(content, dict) or content.get("role", "user") != "user":
            continue
        parts = content.get("parts")
        if any(not _has(p, _RESPONSE) for p in _listed(parts)):
            start = i + 1
    return start


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _has(part: Any, names: tuple[str, str]) -> bool:
    """Whether ``part`` has a member by one of its ``names`` (camelCase, snake_case)."""
    return isinstance(part, dict) and any(name in part for name in names)


def count_body(body: bytes, model: str) -> bytes:
    """A ``countTokens`` body for ``body``: a ``countTokens`` request as sent (its
    ``generateContentRequest`` naming the deployment's model), or a ``generateContent``
    request wrapped as one."""
    raw = RawBody.read(body)
    name = f"models/{model}"
    inner = raw.data.get("generateContentRequest")
    if isinstance(inner, dict):
        return raw.spliced({"generateContentRequest": {**inner, "model": name}}, drop=("model",))
    if set(raw.data) <= GENERATE_FIELDS:
        return as_sent(body, model)
    request = {key: value for key, value in raw.data.items() if key != "model"}
    return encode_json({"generateContentRequest": {"model": name, **request}})


def answer_usage(content: bytes, deployment: str) -> Usage:
    """The usage of a whole ``GenerateContentResponse`` as the upstream sent it."""
    data = load_json(content, deployment)
    meta = data.get("usageMetadata") if isinstance(data, dict) else None
    if not isinstance(meta, dict):
        raise protocol_error(deployment, "sent an answer without usageMetadata")
    return chat_usage(meta)


def total_tokens(content: bytes, deployment: str) -> int:
    """The count in a ``countTokens`` answer."""
    data = load_json(content, deployment)
    tokens = data.get("totalTokens", 0) if isinstance(data, dict) else None
    if not isinstance(tokens, int):
        raise protocol_error(deployment, "sent a token count without totalTokens")
    return tokens


def finishes(event: dict[str, Any]) -> bool:
    """Whether an event ends the answer: a candidate's ``finishReason``, or a blocked prompt."""
    candidates = event.get("candidates")
    if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict):
        return candidates[0].get("finishReason") is not None
    feedback = event.get("promptFeedback")
    return isinstance(feedback, dict) and feedback.get("blockReason") is not None


class PassThrough:
    """A :class:`~gateway.protocol.frames.FrameStream` of an upstream's Gemini events."""

    def __init__(
        self,
        opened: AbstractAsyncContextManager[FrameBatches],
        deployment: str,
        event_error: Callable[[dict[str, Any]], GatewayError],
    ) -> None:
        """``opened``: the upstream's stream once entered; ``event_error``: the error an
        ``{"error": ...}`` event stands for."""
        self._deployment = deployment
        self._event_error = event_error
        self._frames = self._run(opened)
        self._meta: dict[str, Any] | None = None
        self.usage_frame: bytes | None = None

    @property
    def usage(self) -> Usage | None:
        return chat_usage(self._meta) if self._meta is not None else None

    def __aiter__(self) -> PassThrough:
        return self

    async def __anext__(self) -> bytes:
        return await anext(self._frames)

    async def aclose(self) -> None:
        await self._frames.aclose()

    async def _run(
        self, opened: AbstractAsyncContextManager[FrameBatches]
    ) -> AsyncGenerator[bytes, None]:
        finished = False
        async with opened as frames:
            async for batch in frames:
                out: list[bytes] = []
                for frame in batch:
                    event = self._read(frame)
                    if event is None:
                        continue
                    out.append(frame + b"\n\n")
                    finished = finished or finishes(event)
                if out:
                    yield b"".join(out)
        if not finished:
            raise cut_error(self._deployment, "stream ended before a finishReason")

    def _read(self, frame: bytes) -> dict[str, Any] | None:
        """The event in ``frame`` (``None``: no data), its usage kept; an error raises."""
        _, data = parse_event(frame)
        if not data:
            return None
        event = load_json(data, self._deployment)
        if not isinstance(event, dict):
            raise protocol_error(self._deployment, "sent an event that is not an object")
        if "error" in event:
            raise self._event_error(event)
        if isinstance(meta := event.get("usageMetadata"), dict):
            self._meta = meta
        return event
