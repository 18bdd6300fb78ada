"""What a client was sent of a stream, and a continuation rewritten to pick up after it.

A stream that fails after its first byte may be continued on another candidate
(:mod:`gateway.dispatch.midstream.resume`). This module holds the parts that do no I/O:

* :class:`Delivered`: what the client got, read back from the frames it was sent (parsed
  only once a failure happened) or from the chunks a translator turned into its events;
* the continuation request, in the forms a deployment may accept: the original messages
  with the delivered text as a trailing assistant message to be continued (``prefill``),
  the delivered text quoted in a user turn with an instruction to continue from its end
  (``user_turn``), or, for text completions, the prompt followed by the delivered text;
* :class:`Overlap`: the start of a user-turn answer that repeats the end of the delivered
  text, trimmed;
* :class:`Splice`: the continuation's chunks rewritten into the first stream's: its id,
  ``created`` and ``model``, no second ``role``, a tool call the client has the start of
  going on where it stopped, and a closing usage that counts the whole answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from backends.base import CONTINUE_FINAL
from gateway.errors import GatewayError, UpstreamTimeoutError
from gateway.protocol import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    ChoiceDelta,
    ChunkChoice,
    Completion,
    CompletionRequest,
    ToolCallDelta,
    Usage,
)

Form = Literal["prefill", "user_turn", "text"]
Chunk = ChatCompletionChunk | Completion
INSTRUCTION = (
    "Your previous answer was cut off. It is quoted below between <partial_answer> tags. "
    "Continue it from exactly where it stops: write only the rest, without repeating any "
    "of it and without any preamble."
)


@dataclass
class ToolCallSoFar:
    """A streamed tool call as the client has it so far."""

    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class Delivered:
    """The first choice of a stream as the client received it."""

    id: str | None = None
    created: int | None = None
    model: str | None = None
    parts: list[str] = field(default_factory=list)
    tokens: int = 0  # chunks that carried text: about one token each
    finished: bool = False
    calls: dict[int, ToolCallSoFar] = field(default_factory=dict)
    """The tool calls under way, by index: their arguments as far as they were sent."""
    reasoning: bool = False
    choices: int = 1
    prompt_tokens: int | None = None
    """The upstream's own count of the prompt, when a chunk sent so far carried one."""

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add(self, chunk: dict[str, Any]) -> None:
        """Take in one chat or completion chunk, as JSON-ready data."""
        self.id = self.id or chunk.get("id")
        self.created = self.created or chunk.get("created")
        self.model = self.model or chunk.get("model")
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            self.prompt_tokens = usage["prompt_tokens"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if choice.get("index", 0) != 0:
                self.choices = max(self.choices, int(choice.get("index") or 0) + 1)
                continue
            delta = choice.get("delta")
            text = choice.get("text") if delta is None else delta.get("content")
            if isinstance(delta, dict):
                for call in delta.get("tool_calls") or ():
                    self._call(call)
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                self.reasoning = self.reasoning or bool(reasoning)
            if isinstance(text, str) and text:
                self.parts.append(text)
                self.tokens += 1
            self.finished = self.finished or bool(choice.get("finish_reason"))

    def _call(self, call: Any) -> None:
        if not isinstance(call, dict):
            return
        index = int(call.get("index") or 0)
        function = call.get("function") or {}
        so_far = self.calls.setdefault(index, ToolCallSoFar())
        so_far.id = so_far.id or call.get("id")
        so_far.name = so_far.name or function.get("name")
        so_far.arguments += function.get("arguments") or ""

    def unresumable(self, request: ChatCompletionRequest | CompletionRequest) -> str | None:
        """Why this answer cannot be continued elsewhere, or ``None`` when it can."""
        if self.finished:
            return "the answer had finished"
        if self.choices > 1 or (request.n or 1) > 1:
            return "several choices"
        if self.reasoning:
            return "reasoning was under way"
        if isinstance(request, CompletionRequest):
            if request.suffix or (request.best_of or 1) > 1 or request.echo:
                return "echo, suffix or best_of"
            return None
        form = request.response_format
        if form is not None and form.type != "text":
            return "a structured output cannot be continued under its schema"
        if request.tool_choice not in (None, "auto", "none"):
            return "a forced tool call"
        return None


def read_frames(pieces: Iterable[bytes]) -> Delivered:
    """What ``data: {...}`` frames (as sent, several to a piece) delivered."""
    delivered = Delivered()
    for part in b"".join(pieces).split(b"\n\n"):
        part = part.strip()
        if not part.startswith(b"data:"):
            continue
        try:
            chunk = json.loads(part[5:])
        except ValueError:  # [DONE], or a malformed chunk an upstream sent
            continue
        if isinstance(chunk, dict):
            delivered.add(chunk)
    return delivered


def read_chunks(chunks: Iterable[ChatCompletionChunk]) -> Delivered:
    """What parsed chunks (fed to a translator) delivered."""
    delivered = Delivered()
    for chunk in chunks:
        delivered.add(chunk.model_dump(mode="json", exclude_none=True))
    return delivered


class ResumeDivergedError(GatewayError):
    """A continuation disagreed with what the client already has (a tool call's
    arguments): the stream cannot go on whole. Says nothing of the deployment's health."""

    status_code = 502
    error_type = "upstream_error"
    default_code = "resume_diverged"


# --- continuation requests ---------------------------------------------------------------


def continuation(
    request: ChatCompletionRequest | CompletionRequest, delivered: Delivered, form: Form
) -> ChatCompletionRequest | CompletionRequest:
    """The request that asks a deployment for the rest of ``delivered``, in ``form``."""
    update: dict[str, Any] = {"stream": True, "n": None}
    limit = _limit(request)
    if limit is not None:
        name = (
            "max_completion_tokens"
            if isinstance(request, ChatCompletionRequest) and request.max_completion_tokens
            else "max_tokens"
        )
        update[name] = max(1, limit - delivered.tokens)
    text = delivered.text
    if isinstance(request, CompletionRequest):
        prompt = request.prompt if isinstance(request.prompt, str) else request.prompt[0]
        return request.model_copy(update={**update, "prompt": prompt + text})
    if form == "prefill":
        tail = ChatMessage(role="assistant", content=text)
        update.update(CONTINUE_FINAL)
    else:
        quoted = f"{INSTRUCTION}\n\n<partial_answer>\n{text}\n</partial_answer>"
        tail = ChatMessage(role="user", content=quoted)
    return request.model_copy(update={**update, "messages": [*request.messages, tail]})


def left_to_generate(
    request: ChatCompletionRequest | CompletionRequest, delivered: Delivered
) -> int | None:
    """Tokens the client still allows (``None``: no limit)."""
    limit = _limit(request)
    return None if limit is None else limit - delivered.tokens


def _limit(request: ChatCompletionRequest | CompletionRequest) -> int | None:
    if isinstance(request, ChatCompletionRequest):
        return request.output_limit()
    return request.max_tokens


# --- the overlap of a user-turn answer -----------------------------------------------------


class Overlap:
    """Holds the start of a user-turn continuation until it is clear where in the delivered
    text it begins, then drops what it repeats.

    A model asked to continue a quoted answer may start again at the cut, a little before
    it, or from the top. Every word start of the delivered text is a place the answer may
    have restarted from; the held text is matched against each at once, and nothing goes
    out while one of them is still a possible restart. When the held text has run past the
    end of the delivered text from one of them, that repeat (the longest, when several) is
    dropped. A repeat of the end counts from ``min_chars`` characters on: a continuation
    ``"and ..."`` after ``"... a"`` is new text, ``"France ..."`` after ``"... Fra"``
    repeats three; the whole delivered text said again is a restart at any length.

    An answer that restarted from the top and then says something else (``restart_chars``
    characters alike, then not) is no continuation of what the client has: ``feed``
    raises :class:`ResumeDivergedError`, which ends the stream with the in-band error."""

    def __init__(self, delivered: str, min_chars: int = 3, restart_chars: int = 24) -> None:
        self._text = delivered
        self._min = min_chars
        self._restart = restart_chars
        self._held = ""
        last = len(delivered) - min_chars
        # the whole text said again is a restart however short it is
        self._open = [p for p in range(max(1, last + 1)) if self._word_start(p)]
        self._repeats: list[int] = []  # starts whose whole rest the held text repeats
        self._top = 0  # characters the held text matched from the top, once it stopped
        self.done = not self._open

    def feed(self, text: str) -> str:
        """What of ``text`` may be sent now."""
        if self.done:
            return text
        matched = len(self._held)
        self._held += text
        still = []
        for start in self._open:
            at = start + matched  # where in the delivered text ``text`` would go on
            rest = len(self._text) - at
            if rest <= len(text):
                if text.startswith(self._text[at:]):
                    self._repeats.append(start)
            elif self._text.startswith(text, at):
                still.append(start)
            elif start == 0:
                self._top = matched + _common(text, self._text[at : at + len(text)])
        self._open = still
        return "" if still else self._decide()

    def flush(self) -> str:
        """Decide with what is held: the answer ended, or a chunk must go out. An answer
        that ends while still repeating the delivered text added nothing to it."""
        if self.done:
            return ""
        if self._open and len(self._held) >= self._min:
            self.done = True
            return ""
        return self._decide()

    def _decide(self) -> str:
        self.done = True
        held = self._held
        if self._repeats:
            return held[len(self._text) - min(self._repeats) :]
        if self._top >= min(self._restart, len(self._text)):
            raise ResumeDivergedError(
                "the continuation started the answer again and then departed from it"
            )
        return held

    def _word_start(self, start: int) -> bool:
        text = self._text
        if start == 0:
            return True
        return text[start - 1].isspace() or text[start].isspace()


def _common(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    size = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        size += 1
    return size


# --- the continuation's chunks, as the first stream's ---------------------------------------


class Splice:
    """Rewrites a continuation's chunks into the stream the client is reading.

    ``close`` turns the continuation's own usage (``None`` when it sent none) into the
    usage of the whole answer, sent in the closing usage-only chunk. ``deadline`` is the
    loop time by which the continuation must end (its deployment's ``total_s``)."""

    def __init__(
        self,
        delivered: Delivered,
        close: Callable[[Usage | None, int], Usage],
        trim: Overlap | None = None,
        deadline: float | None = None,
        deployment: str = "",
    ) -> None:
        self._delivered = delivered
        self._close = close
        self._trim = trim
        self._deadline = deadline
        self._deployment = deployment
        self._matched = dict.fromkeys(delivered.calls, 0)  # arguments the answer repeated
        self.tokens = 0  # chunks of the continuation that carried text

    async def chunks(self, first: Chunk, rest: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
        """``first`` then ``rest``, rewritten; the usage-only chunk comes last."""
        usage: Usage | None = None
        last: Chunk = first
        try:
            chunk: Chunk | None = first
            while chunk is not None:
                last = chunk
                if chunk.usage is not None and not chunk.choices:
                    usage = chunk.usage
                elif self._rewrite(chunk):
                    yield chunk
                chunk = await self._next(rest)
        finally:
            close = getattr(rest, "aclose", None)
            if close is not None:
                await close()
        self._check_calls()
        held = self._trim.flush() if self._trim is not None else ""
        if held and isinstance(last, ChatCompletionChunk):
            yield self._text_chunk(last, held)
        yield self._usage_chunk(last, self._close(usage, self.tokens))

    async def _next(self, rest: AsyncIterator[Chunk]) -> Chunk | None:
        if self._deadline is None:
            return await anext(rest, None)
        try:
            async with asyncio.timeout_at(self._deadline):
                return await anext(rest, None)
        except TimeoutError as exc:
            raise UpstreamTimeoutError(
                f"deployment {self._deployment!r} did not finish its continuation in time"
            ) from exc

    def _rewrite(self, chunk: Chunk) -> bool:
        """Rewrite ``chunk`` in place; False when nothing of it is left to send."""
        d = self._delivered
        chunk.id = d.id or chunk.id
        chunk.created = d.created or chunk.created
        chunk.model = d.model or chunk.model
        chunk.usage = None
        if isinstance(chunk, Completion):
            said = chunk.choices[0]
            self.tokens += bool(said.text)
            return bool(said.text) or said.finish_reason is not None
        kept = False
        for choice in chunk.choices:
            delta = choice.delta
            delta.role = None
            text = delta.content
            if self._trim is not None:
                text = self._trim.feed(text) if text else text
                if choice.finish_reason is not None:  # nothing more comes to decide with
                    text = (text or "") + self._trim.flush()
            delta.content = text or None
            self.tokens += bool(text)
            if delta.tool_calls and self._matched:
                delta.tool_calls = self._trim_calls(delta.tool_calls) or None
            kept = kept or bool(text or delta.tool_calls or choice.finish_reason)
        return kept

    def _trim_calls(self, calls: list[ToolCallDelta]) -> list[ToolCallDelta]:
        """The tool-call deltas less what the client already has: a call it has the start
        of is written again from its beginning by the continuation (a model cannot be
        handed half a call); its id, name and the arguments sent are dropped, and what
        follows them goes on under the call's index."""
        kept = []
        for call in calls:
            sent = self._delivered.calls.get(call.index)
            if sent is None:
                kept.append(call)
                continue
            call.id = call.type = None
            piece = (call.function or {}).get("arguments") or ""
            matched = self._matched[call.index]
            expected = sent.arguments[matched : matched + len(piece)]
            if not piece.startswith(expected):
                raise ResumeDivergedError(
                    f"deployment {self._deployment!r} continued tool call {call.index} "
                    "with other arguments than those already sent"
                )
            self._matched[call.index] = matched + len(expected)
            rest = piece[len(expected) :]
            call.function = {"arguments": rest} if rest else None
            if rest:
                kept.append(call)
        return kept

    def _check_calls(self) -> None:
        for index, sent in self._delivered.calls.items():
            if self._matched[index] < len(sent.arguments):
                raise ResumeDivergedError(
                    f"deployment {self._deployment!r} did not finish tool call {index} "
                    "the way it was begun"
                )

    def _text_chunk(self, last: ChatCompletionChunk, text: str) -> ChatCompletionChunk:
        choice = ChunkChoice(delta=ChoiceDelta(content=text))
        return ChatCompletionChunk(
            id=last.id, created=last.created, model=last.model, choices=[choice]
        )

    def _usage_chunk(self, last: Chunk, usage: Usage) -> Chunk:
        d = self._delivered
        fields = {"id": d.id or last.id, "created": d.created or last.created}
        fields.update(model=d.model or last.model, choices=[], usage=usage)
        return type(last)(**fields)
