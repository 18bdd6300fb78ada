"""Cascade: the smallest candidate answers first; a larger one only when it is unsure.

A model with ``cascade: {min_confidence: 0.6}`` is routed by its policy as any other (for
instance ``[healthy, capable, smallest]``); then, along the ranked candidates:

1. the first candidate that can return token logprobs, with a later candidate to go to
   and escalations left (``max_escalations``, default 1), is *judged*: its backend is
   wrapped in a :class:`~gateway.dispatch.judged.JudgedBackend`, which asks for logprobs
   and hides them again from a client that did not ask;
2. the usual failover runs (retries, fallback, breakers): a judged candidate that fails
   is left as any other, and the step counts as ``failed``;
3. the answer's confidence (:mod:`policies.confidence`) at or above ``min_confidence`` is
   served (``served``); below it the answer is dropped, its tokens noted for the bill, and
   the same request goes to the candidates after it (``escalated``).

A stream is judged before any of it reaches the client: whole by default (every frame is
held until the stream ends), or on its first ``judge_tokens`` tokens, after which the held
frames and the rest flow straight through, or the stream is closed and the request
escalates. What the HTTP layer receives is an ordinary opened stream of the answer that
was served: one ``id``, one ``finish_reason``, nothing of a dropped answer. A judged
stream that fails before it is judged escalates too (nothing was sent yet).

A candidate that cannot return logprobs (Anthropic, an upstream with ``logprobs: false``)
is never judged: its answer is served as it is, so it can only be a cascade's last step
(``check-config`` refuses a cascade that ranks one first).

:class:`CascadeReport` keeps each judged step (deployment, confidence, outcome, the
dropped answer's usage): it leads the ``x-shunter-route`` header (``cascade small
0.31<0.60 -> large; policy: ...``), feeds ``shunter_cascade_steps_total`` and the request's
span, and bills the dropped answers with the served one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from backends.base import Price, cost_usd
from gateway.dispatch.cascade.judged import Judge, JudgedBackend
from gateway.dispatch.failover.attempts import Candidate
from gateway.dispatch.failover.rules import Opening, Routing
from gateway.dispatch.health.live import Attempt
from gateway.errors import GatewayError
from gateway.protocol import Usage
from gateway.protocol.frames import Stream
from gateway.telemetry.tracing import current
from policies import CascadeRule

T = TypeVar("T")
Outcome = Literal["served", "escalated", "failed"]
OUTCOMES: tuple[Outcome, ...] = ("served", "escalated", "failed")
FirstSuccess = Callable[
    [Routing, Callable[[Candidate], Awaitable[T]]], Awaitable[tuple[Candidate, tuple[T, Attempt]]]
]
USAGE_HEADER = "x-shunter-cascade-usage"
_MAX_ROUTE = 200


@dataclass(frozen=True)
class CascadeStep:
    """One judged candidate: what it scored, what became of its answer, and (dropped
    answers only) the tokens and dollars it cost."""

    deployment: str
    outcome: Outcome
    confidence: float | None = None
    usage: Usage | None = None
    price: Price | None = None

    @property
    def cost_usd(self) -> float:
        """What the dropped answer cost (0 for a served or failed step)."""
        if self.usage is None:
            return 0.0
        return cost_usd(self.price, self.usage.prompt_tokens, self.usage.completion_tokens)

    def fact(self) -> dict[str, Any]:
        """The step as the access log, metrics and span see it."""
        fact: dict[str, Any] = {"deployment": self.deployment, "outcome": self.outcome}
        if self.confidence is not None:
            fact["confidence"] = round(self.confidence, 4)
        if self.usage is not None:
            fact["prompt_tokens"] = self.usage.prompt_tokens
            fact["completion_tokens"] = self.usage.completion_tokens
            fact["cost_usd"] = round(self.cost_usd, 8)
        return fact


@dataclass(frozen=True)
class Bill:
    """What one request is settled with: every answer's tokens (limits count them all),
    every answer's dollars, and the log/metrics facts of the served answer."""

    usage: Usage | None
    cost_usd: float
    facts: dict[str, Any]


@dataclass
class CascadeReport:
    """What a cascade did for one request."""

    rule: CascadeRule
    model: str
    steps: list[CascadeStep] = field(default_factory=list)

    def add(self, step: CascadeStep) -> None:
        """Note one judged step (and tell the request's telemetry)."""
        self.steps.append(step)
        traced = current()
        if traced is None:
            return
        traced.facts["cascade"] = [s.fact() for s in self.steps]
        span = traced.span
        if span is not None and span.is_recording():
            span.set_attributes(self._attributes())

    def _attributes(self) -> dict[str, Any]:
        first = self.steps[0]
        attributes: dict[str, Any] = {
            "shunter.cascade.deployment": first.deployment,
            "shunter.cascade.outcome": first.outcome,
            "shunter.cascade.steps": self.text(),
            "shunter.cascade.min_confidence": self.rule.min_confidence,
        }
        if first.confidence is not None:
            attributes["shunter.cascade.confidence"] = first.confidence
        return attributes

    def text(self, served: str | None = None) -> str:
        """``cascade small 0.31<0.60 -> large``, ``cascade small 0.82>=0.60``,
        ``cascade small failed -> large``."""
        parts = []
        for step in self.steps:
            if step.outcome == "failed":
                parts.append(f"{step.deployment} failed")
                continue
            shown = "?" if step.confidence is None else f"{step.confidence:.2f}"
            sign = ">=" if step.outcome == "served" else "<"
            parts.append(f"{step.deployment} {shown}{sign}{self.rule.min_confidence:.2f}")
        if served is not None and (not self.steps or self.steps[-1].outcome != "served"):
            parts.append(served)
        return "cascade " + " -> ".join(parts)

    def route(self, served: str, reason: str) -> str:
        """The ``x-shunter-route`` value: the cascade's steps, then the usual reason."""
        text = f"{self.text(served)}; {reason}"
        text = text.encode("ascii", "replace").decode("ascii")
        return text if len(text) <= _MAX_ROUTE else text[: _MAX_ROUTE - 3] + "..."

    def dropped(self) -> tuple[Usage, float]:
        """The tokens and dollars of the answers that were judged and not served."""
        prompt = completion = 0
        dollars = 0.0
        for step in self.steps:
            if step.usage is not None:
                prompt += step.usage.prompt_tokens
                completion += step.usage.completion_tokens
                dollars += step.cost_usd
        return Usage.of(prompt, completion), dollars

    def bill(
        self, price: Price | None, usage: Usage | None, served_usd: float | None = None
    ) -> Bill:
        """Settle the served answer (``usage`` at ``price``, or ``served_usd`` when the
        caller priced it) and the dropped ones together; the facts keep the served answer's
        own tokens and dollars (the dropped ones are in the ``cascade`` fact)."""
        dropped, dropped_usd = self.dropped()
        if usage is None:
            total = dropped if dropped.total_tokens else None
            return Bill(total, dropped_usd, {})
        if served_usd is None:
            served_usd = cost_usd(price, usage.prompt_tokens, usage.completion_tokens)
        total = Usage.of(
            usage.prompt_tokens + dropped.prompt_tokens,
            usage.completion_tokens + dropped.completion_tokens,
        )
        facts = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cost_usd": round(served_usd, 8),
        }
        return Bill(total, served_usd + dropped_usd, facts)

    def headers(self, price: Price | None, usage: Usage | None) -> dict[str, str]:
        """``x-shunter-cascade-usage``: every answer's tokens and dollars together. Before
        the served answer's usage is known (a stream's headers), the answers before it,
        said so."""
        if not self.steps:
            return {}
        dropped, dollars = self.dropped()
        prompt, completion = dropped.prompt_tokens, dropped.completion_tokens
        suffix = " before the served answer"
        if usage is not None:
            prompt, completion = prompt + usage.prompt_tokens, completion + usage.completion_tokens
            dollars += cost_usd(price, usage.prompt_tokens, usage.completion_tokens)
            suffix = ""
        value = f"prompt_tokens={prompt}, completion_tokens={completion}, cost_usd={dollars:.8f}"
        return {USAGE_HEADER: value + suffix}


def cascade_headers(
    report: CascadeReport | None, price: Price | None, usage: Usage | None
) -> dict[str, str]:
    """The cascade's response headers (none without a cascade): see
    :meth:`CascadeReport.headers`."""
    return {} if report is None else report.headers(price, usage)


def cascade_plan(rule: CascadeRule, ranked: Sequence[tuple[str, bool]]) -> str:
    """The cascade along ``ranked`` (deployment names best first, each with whether it can
    return logprobs), as ``shunter route`` prints it."""
    lines = [
        f"cascade: serve when {rule.describe()}, else move up (at most {rule.max_escalations})"
    ]
    judged = 0
    for index, (name, logprobs) in enumerate(ranked):
        last = index + 1 == len(ranked)
        if logprobs and not last and judged < rule.max_escalations:
            judged += 1
            lines.append(f"  {index + 1}. {name}: judged; below {rule.min_confidence:.2f} -> next")
            continue
        why = "the last step" if last or logprobs else "cannot return logprobs, never judged"
        lines.append(f"  {index + 1}. {name}: serves what reaches it ({why})")
        break
    if ranked and not ranked[0][1]:
        lines.append(f"  note: {ranked[0][0]} ranks first and cannot be judged: nothing escalates")
    return "\n".join(lines)


@dataclass
class _Lane:
    """The candidates one cascade step runs along, the judged ones wrapped."""

    candidates: list[Candidate]
    judges: dict[str, Judge]

    @classmethod
    def of(cls, rest: Sequence[Candidate], rule: CascadeRule, judging: bool) -> _Lane:
        judges: dict[str, Judge] = {}
        lane = []
        for index, candidate in enumerate(rest):
            if judging and index + 1 < len(rest) and candidate.settings.returns_logprobs():
                judge = judges[candidate.settings.name] = Judge(rule)
                candidate = replace(candidate, backend=JudgedBackend(candidate.backend, judge))
            lane.append(candidate)
        return cls(lane, judges)

    def failed_before(self, chosen: Candidate, report: CascadeReport) -> None:
        """Judged candidates the failover left before ``chosen``: their step failed."""
        for candidate in self.candidates:
            if candidate.settings.name == chosen.settings.name:
                return
            if candidate.settings.name in self.judges:
                report.add(CascadeStep(candidate.settings.name, "failed"))

    def after(self, chosen: Candidate) -> list[Candidate]:
        """The candidates ranked after ``chosen``, unwrapped."""
        names = [c.settings.name for c in self.candidates]
        return [_unwrapped(c) for c in self.candidates[names.index(chosen.settings.name) + 1 :]]


def _unwrapped(candidate: Candidate) -> Candidate:
    backend = candidate.backend
    if isinstance(backend, JudgedBackend):
        return replace(candidate, backend=backend.inner)
    return candidate


@dataclass(frozen=True)
class Cascade:
    """Runs one request's cascade; ``first_success`` is the failover (with its spans and
    the deployment admission) along a lane of candidates."""

    rule: CascadeRule
    model: str
    routing: Routing

    async def call(
        self, first_success: FirstSuccess[T], attempt: Callable[[Candidate], Awaitable[T]]
    ) -> tuple[Candidate, T, Attempt, CascadeReport]:
        """A whole answer: judged, served or escalated."""
        report = CascadeReport(self.rule, self.model)
        rest, escalations = self.routing.candidates, 0
        while True:
            lane = _Lane.of(rest, self.rule, escalations < self.rule.max_escalations)
            routing = replace(self.routing, candidates=lane.candidates)
            chosen, (value, tracked) = await first_success(routing, attempt)
            lane.failed_before(chosen, report)
            judge = lane.judges.get(chosen.settings.name)
            if judge is None:
                return _unwrapped(chosen), value, tracked, report
            score = judge.confidence()
            if self.rule.sure(score):
                report.add(CascadeStep(chosen.settings.name, "served", score))
                return _unwrapped(chosen), value, tracked, report
            usage = getattr(value, "usage", None)
            tracked.finish(usage.completion_tokens if isinstance(usage, Usage) else None)
            usage = usage if isinstance(usage, Usage) else self._estimate(judge)
            price = chosen.settings.price
            report.add(CascadeStep(chosen.settings.name, "escalated", score, usage, price))
            rest, escalations = lane.after(chosen), escalations + 1

    async def open(
        self,
        first_success: FirstSuccess[Opening],
        first_chunk: Callable[[Candidate], Awaitable[Opening]],
    ) -> tuple[Candidate, Opening, Attempt, CascadeReport]:
        """A stream: judged before anything of it is sent, then served or escalated."""
        report = CascadeReport(self.rule, self.model)
        rest, escalations = self.routing.candidates, 0
        while True:
            lane = _Lane.of(rest, self.rule, escalations < self.rule.max_escalations)
            routing = replace(self.routing, candidates=lane.candidates)
            chosen, (opening, tracked) = await first_success(routing, first_chunk)
            lane.failed_before(chosen, report)
            judge = lane.judges.get(chosen.settings.name)
            if judge is None:
                return _unwrapped(chosen), opening, tracked, report
            stream = opening.stream
            held = await self._hold(chosen, opening.first, stream, judge, tracked, report)
            if held is not None:
                frames, ended = held
                opening.first, opening.stream = frames[0], Held(frames[1:], stream, ended)
                return _unwrapped(chosen), opening, tracked, report
            if report.steps[-1].outcome == "escalated":
                escalations += 1
            rest = lane.after(chosen)  # never empty: only a candidate with a later one is judged

    async def _hold(
        self,
        chosen: Candidate,
        first: Any,
        stream: Stream[Any],
        judge: Judge,
        tracked: Attempt,
        report: CascadeReport,
    ) -> tuple[list[Any], bool] | None:
        """Read the stream until it can be judged; if served, its frames and whether it
        ended; else ``None`` (the stream closed, the step noted)."""
        name, held = chosen.settings.name, [first]
        done = False
        try:
            while not judge.enough():
                held.append(await anext(stream))
        except StopAsyncIteration:
            done = True
        except GatewayError:
            tracked.finish(None, failed=True)
            report.add(CascadeStep(name, "failed"))
            await _close(stream)
            return None
        except BaseException:
            tracked.finish(None, failed=True)
            await _close(stream)
            raise
        score = judge.confidence()
        if self.rule.sure(score):
            report.add(CascadeStep(name, "served", score))
            return held, done
        usage = stream.usage if done and stream.usage is not None else self._estimate(judge)
        tracked.finish(usage.completion_tokens)
        await _close(stream)
        report.add(CascadeStep(name, "escalated", score, usage, chosen.settings.price))
        return None

    def _estimate(self, judge: Judge) -> Usage:
        """A dropped answer's usage when its own is not known: the routing estimate of the
        prompt and the tokens seen."""
        return Usage.of(self.routing.request.prompt_tokens, judge.count)


class Held:
    """A judged stream, served: the frames held while judging, then the rest as it comes."""

    def __init__(self, held: list[Any], rest: Stream[Any], ended: bool) -> None:
        self._held = held
        self._next = 0
        self._rest = rest
        self._ended = ended  # the rest is spent: it is not asked again

    @property
    def usage(self) -> Usage | None:
        return self._rest.usage

    @property
    def usage_frame(self) -> bytes | None:
        return self._rest.usage_frame

    def __aiter__(self) -> Held:
        return self

    async def __anext__(self) -> Any:
        if self._next < len(self._held):
            self._next += 1
            return self._held[self._next - 1]
        if self._ended:
            raise StopAsyncIteration
        return await anext(self._rest)

    async def aclose(self) -> None:
        await self._rest.aclose()


async def _close(stream: Stream[Any]) -> None:
    with contextlib.suppress(Exception):
        await stream.aclose()
