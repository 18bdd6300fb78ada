"""A stream that survives its upstream: when it fails after its first byte, the rest comes
from the continuation :class:`~gateway.dispatch.midstream.resume.Resume` opens on another
candidate, marked by an SSE comment line (bytes, in a stream of chunks too: an encoder
writes it as it is); only when nothing can continue does the failure reach the reader."""

from __future__ import annotations

from typing import Any

from gateway.dispatch.health.live import Attempt
from gateway.dispatch.midstream.resume import Resume
from gateway.protocol.frames import Stream, Wrapped


class Surviving(Wrapped):
    """``inner``'s frames, continued past a failure where ``resume`` can. ``attempt``
    tracks the deployment now answering (a continuation's own, after a resume)."""

    def __init__(self, inner: Stream[Any], resume: Resume, attempt: Attempt) -> None:
        self._inner = inner
        self._resume = resume
        self.attempt = attempt
        # references only (frames): parsed on a failure, to continue from
        self._sent = resume.sent

    def __aiter__(self) -> Surviving:
        return self

    async def __anext__(self) -> Any:
        try:
            data = await self._inner.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as exc:
            continued = await self._resume.after(exc, self._inner, self.attempt)
            if continued is None:
                raise
            self._inner, self.attempt = continued
            return self._resume.note
        if self._sent is not None:
            self._sent.append(data)
        return data

    async def aclose(self) -> None:
        await self._inner.aclose()
