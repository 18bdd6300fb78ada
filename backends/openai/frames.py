"""The upstream's stream frames as bytes: what the raw pass-through path peeks at.

:class:`RawChatStream` hands the upstream's chat frames on without parsing each chunk;
:func:`finishes` and :func:`usage_only` tell, by byte search, whether a frame ends the
answer; :func:`model_swap` finds the upstream's ``model`` field to replace with the public
name.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator
from typing import Any

from pydantic import ValidationError

from backends.http.errors import protocol_error
from backends.http.jsonbody import encode_json, load_json
from backends.http.sse import block_of, event_start, frames_of
from gateway.protocol import Usage, new_id, now

# a chunk that still runs: every chunk before the last says so (OpenAI, vLLM, llama-server)
_RUNNING = (b'"finish_reason":null', b'"finish_reason": null')
_NO_CHOICES = (b'"choices":[]', b'"choices": []')
# every usage object names its token counts ("prompt_tokens", ...): a read without this has
# no usage to record, "usage": null on every chunk or not (one byte scan)
_COUNTS = b'_tokens"'
_MODEL_FIELD = re.compile(rb'"model"\s*:\s*("(?:[^"\\]|\\.)*")')


class RawChatStream:
    """Upstream chat frames as bytes (``data: {...}\\n\\n``), with cheap peeking only.

    Yields every chunk frame except the usage-only one and ``[DONE]``, the frames of one
    upstream read together (nothing waits for more to arrive); the caller writes
    those: after the stream ends, :attr:`usage` and :attr:`usage_frame` are set (the
    upstream's own usage chunk, or one built here), then ``data: [DONE]``. Errors sent
    in-band and cut streams raise as in
    :meth:`~backends.openai.backend.OpenAICompatBackend.chat_stream`.

    ``model`` is the public name: the first frame tells the upstream's own ``"model": "…"``
    field, and when it differs that field is replaced by bytes in every read (one
    ``bytes.replace``, no parse). Otherwise nothing is rewritten: ``id`` and extra fields
    are the upstream's, and a malformed chunk reaches the client. When the upstream sends
    no usage, ``completion_tokens`` is the number of chunk frames (about one token each),
    because counting characters would need a parse. A read is split into its frames only
    when it may carry a usage object (one that names a token count;
    ``"usage": null`` on every chunk is none).
    """

    def __init__(
        self,
        blocks: AsyncGenerator[tuple[bytes, int], None],
        deployment: str,
        prompt_tokens: int,
        model: str,
        public: bytes | None = None,
    ) -> None:
        """``blocks``: the frames of each read as one piece (each followed by its blank
        line) and their number; ``model``: the public name; ``public``: the same as a
        JSON string, if at hand."""
        self._blocks = blocks
        self._deployment = deployment
        self._prompt_tokens = prompt_tokens
        self._model = model
        self._public = public or json.dumps(model).encode()
        self._first: bytes | None = None
        self._swap: tuple[bytes, bytes] | None = None
        self._count = 0
        self.usage: Usage | None = None
        self.usage_frame: bytes | None = None

    def __aiter__(self) -> RawChatStream:
        return self

    async def __anext__(self) -> bytes:
        """The frames of the next upstream read, written as one piece."""
        while True:
            try:
                block, count = await self._blocks.__anext__()
            except StopAsyncIteration:
                self._finish()
                raise
            if self._first is None:
                self._first = block[: block.find(b"\n\n")]
                self._swap = model_swap(self._first, self._public)
            at = block.find(_COUNTS)
            if at >= 0:
                block = self._without_usage(block, count, at)
                if not block:
                    continue
            else:
                self._count += count
            return block if self._swap is None else block.replace(*self._swap)

    def _without_usage(self, block: bytes, count: int, at: int) -> bytes:
        """``block`` (``count`` frames) less its usage-only chunk, the usage recorded; only
        the frames from the one holding ``at`` on are looked at one by one."""
        cut = event_start(block, at)
        rest = frames_of(block[cut:])
        frames = [f for f in rest if not self._take_usage(f)]
        self._count += count - len(rest) + len(frames)
        return block[:cut] + block_of(frames)

    async def aclose(self) -> None:
        """Stop reading and close the upstream response at once."""
        await self._blocks.aclose()

    async def __aenter__(self) -> RawChatStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _take_usage(self, frame: bytes) -> bool:
        """Record the usage in ``frame``, if any; True if it is the usage-only chunk."""
        if b'"usage"' not in frame or b'"usage":null' in frame or b'"usage": null' in frame:
            return False
        payload = load_json(frame[5:], self._deployment)
        usage = payload.get("usage") if isinstance(payload, dict) else None
        if usage is None:
            return False
        try:
            self.usage = Usage.model_validate(usage)
        except ValidationError:
            raise protocol_error(self._deployment, "sent an invalid usage object") from None
        if payload.get("choices"):
            return False
        frame = frame if self._swap is None else frame.replace(*self._swap)
        self.usage_frame = frame + b"\n\n"
        return True

    def _finish(self) -> None:
        if self.usage is None:
            self.usage = Usage.of(self._prompt_tokens, self._count)
        if self.usage_frame is None:
            head = load_json(self._first[5:], self._deployment) if self._first else {}
            chunk: dict[str, Any] = {
                "id": head.get("id") or new_id("chatcmpl"),
                "choices": [],
                "created": head.get("created") or now(),
                "model": self._model,
                "object": "chat.completion.chunk",
                "usage": self.usage.model_dump(),
            }
            self.usage_frame = b"data: " + encode_json(chunk) + b"\n\n"


def finishes(frame: bytes) -> bool:
    """Whether a chunk ends the answer: a ``finish_reason`` set, or usage (byte peeks)."""
    if b'"finish_reason"' in frame:
        return not (_RUNNING[0] in frame or _RUNNING[1] in frame)
    return b'"usage":{' in frame or b'"usage": {' in frame


def usage_only(frame: bytes) -> bool:
    """The usage-only chunk that closes a stream (``choices: []`` and usage)."""
    return (_NO_CHOICES[0] in frame or _NO_CHOICES[1] in frame) and b'"usage"' in frame


def model_swap(first: bytes, public: bytes) -> tuple[bytes, bytes] | None:
    """The upstream's ``"model": "…"`` field as it appears in ``first``, and the field to
    put in its place (``public``: the public name as a JSON string, quotes included);
    ``None`` when they already agree."""
    found = _MODEL_FIELD.search(first)
    if found is None or found.group(1) == public:
        return None
    return found.group(0), b'"model":' + public
