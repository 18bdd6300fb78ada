"""What dispatch hands back: a whole answer (:class:`Routed`) or a stream
(:class:`ServedStream`), each with the deployment that served it, why that one, the
response headers that say so, and the bill to settle it with.

A :class:`ServedStream` survives its upstream: it is guarded against stalls
(:mod:`~gateway.dispatch.midstream.stall`), continued on another candidate when it fails
after its first byte and the route allows (:mod:`~gateway.dispatch.midstream.resume`), and
priced per deployment when it was. Whoever reads its ``first`` frame and then its ``rest``
reads one uninterrupted stream that ends with the answer or raises the failure nothing
could continue (:mod:`~gateway.dispatch.midstream.surviving`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog

from backends.base import Backend, Price, usage_cost
from gateway.dispatch.cascade.run import Bill, CascadeReport
from gateway.dispatch.failover.attempts import Candidate
from gateway.dispatch.failover.rules import OpenedStream
from gateway.dispatch.midstream.resume import Resume
from gateway.dispatch.midstream.stall import stall_guard
from gateway.dispatch.midstream.surviving import Surviving
from gateway.dispatch.work import Sending
from gateway.errors import GatewayError
from gateway.protocol import Usage
from gateway.protocol.frames import Stream

T = TypeVar("T")
log = structlog.get_logger("shunter.dispatch")


@dataclass(frozen=True)
class Routed(Generic[T]):
    """A whole response, the deployment that gave it, and why that one (after any
    fallback: ``b after a: rate_limited; policy: ...``)."""

    candidate: Candidate
    value: T
    reason: str
    cascade: CascadeReport | None = None
    sending: Sending | None = None
    """What the deployment was sent (for a :class:`~gateway.dispatch.work.Work`)."""
    usage: Usage | None = None
    """What the answer is billed with (for a :class:`~gateway.dispatch.work.Work`)."""

    @property
    def deployment(self) -> str:
        return self.candidate.settings.name

    def headers(self, usage: Usage | None) -> dict[str, str]:
        """Which deployment answered and why; a cascade's usage of every answer."""
        price = self.candidate.settings.price
        return {
            **route_headers(self.candidate, self.reason),
            **_cascade(self.cascade, price, usage),
        }

    def bill(self, usage: Usage | None) -> Bill:
        """What the request is settled with, ``usage`` at the deployment's price."""
        return bill_of(self.candidate.settings.price, usage, None, self.cascade)


class ServedStream:
    """A stream whose first frame has arrived (safe to commit the HTTP response), that
    survives stalls and failures where its route allows; see the module docstring.

    Write ``first``, then the frames of ``rest`` as they come (the continuations included);
    then :meth:`close` it (also after a failure or a client that left): it reports the end
    to the live figures and gives the bill."""

    def __init__(
        self,
        opened: OpenedStream,
        resume: Resume | None,
        cascade: CascadeReport | None = None,
        sending: Sending | None = None,
    ) -> None:
        self.candidate = opened.candidate
        self.first: Any = opened.first
        self.reason = opened.reason
        self.cascade = cascade
        self.sending = sending
        """What the deployment that opened it was sent (for a
        :class:`~gateway.dispatch.work.Work`)."""
        self.failure: GatewayError | None = None
        """The failure nothing could continue, once the stream ended with it."""
        self._resume = resume
        guarded = stall_guard(opened.rest, opened.candidate)
        self._surviving = None if resume is None else Surviving(guarded, resume, opened.attempt)
        self.rest: Stream[Any] = guarded if self._surviving is None else self._surviving
        self._attempt = opened.attempt

    async def pieces(self) -> AsyncIterator[Any]:
        """``first``, then the rest as it comes. The failure nothing could continue is
        kept in :attr:`failure` and raised on, as a :class:`GatewayError` (an unexpected
        one is logged first), for the encoder to write as its API's in-band error."""
        try:
            yield self.first
            async for piece in self.rest:
                yield piece
        except GatewayError as exc:
            self.failure = exc
            raise
        except Exception as exc:
            log.exception("stream_failed", deployment=self.deployment)
            self.failure = GatewayError("The stream failed on the server; it is incomplete.")
            raise self.failure from exc

    @property
    def backend(self) -> Backend:
        return self.candidate.backend

    @property
    def deployment(self) -> str:
        return self.candidate.settings.name

    @property
    def headers(self) -> dict[str, str]:
        """Which deployment answers and why (whoever continues it); a cascade's usage of
        the answers it dropped."""
        price = self.candidate.settings.price
        return {**route_headers(self.candidate, self.reason), **_cascade(self.cascade, price, None)}

    @property
    def usage(self) -> Usage | None:
        """The answer's usage (every deployment's part, after a resume), once it ended."""
        return self.rest.usage

    @property
    def usage_frame(self) -> bytes | None:
        """The frame that carried the upstream's usage (chat and completions), if any."""
        return self.rest.usage_frame

    async def close(self) -> Bill:
        """Close the stream; its end goes to the live figures, its usage into the bill."""
        await self.rest.aclose()
        usage = self.usage
        attempt = self._attempt if self._surviving is None else self._surviving.attempt
        if usage is None:
            attempt.finish(None)
        else:
            attempt.finish(usage.completion_tokens, prompt_tokens=usage.prompt_tokens)
        cost = self._resume.cost(usage) if self._resume is not None else None
        return bill_of(self.candidate.settings.price, usage, cost, self.cascade)


def bill_of(
    price: Price | None,
    usage: Usage | None,
    cost: float | None,
    cascade: CascadeReport | None,
) -> Bill:
    """``usage`` at ``cost`` (by default at ``price``), with the answers a cascade judged
    and dropped on the way; no usage: nothing to charge."""
    if cascade is not None and cascade.steps:
        return cascade.bill(price, usage, cost)
    if usage is None:
        return Bill(None, 0.0, {})
    if cost is None:
        cost = usage_cost(price, usage)
    facts = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cost_usd": round(cost, 8),
    }
    return Bill(usage, cost, facts)


def route_headers(chosen: Candidate, reason: str) -> dict[str, str]:
    return {
        "x-shunter-deployment": chosen.settings.name,
        "x-shunter-upstream-model": chosen.settings.model,
        "x-shunter-route": reason,
        "cache-control": "no-cache",
    }


def _cascade(
    report: CascadeReport | None, price: Price | None, usage: Usage | None
) -> dict[str, str]:
    return {} if report is None else report.headers(price, usage)
