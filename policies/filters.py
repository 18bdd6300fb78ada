"""Filters: ``healthy``, ``capable``, ``fits_memory``, ``within_budget``.

When a filter would remove every candidate:

* ``healthy`` keeps the least-recently-failed one (an unhealthy deployment may have
  recovered; answering beats refusing), and the decision says so;
* ``capable``, ``fits_memory`` and ``within_budget`` reject: a deployment that cannot serve
  the request, cannot load the model or breaks the budget is never a right answer, so
  the gateway gets no candidate and answers with an error naming the filter.
"""

from __future__ import annotations

import math
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.facts import Candidate, Capabilities, FitClass
from policies.predict import estimate_cost_usd
from policies.steps import Check, FilterStep, NoArgs, OnEmpty, RouteContext


class HealthyArgs(BaseModel):
    """``healthy: {max_error_rate: 0.5}``; the error-rate cap is optional."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_error_rate: float | None = Field(default=None, ge=0, le=1)


class Healthy(FilterStep):
    """Drop deployments marked unhealthy, cooling down, or above an error-rate cap."""

    name = "healthy"
    args_model = HealthyArgs
    on_empty: ClassVar[OnEmpty] = "keep_least_bad"

    def __init__(self, args: HealthyArgs | None = None) -> None:
        self.args = args or HealthyArgs()
        self.reads_live = self.args.max_error_rate is not None
        self.kind_of = None if self.reads_live else _breaker_state

    def passes(self, ctx: RouteContext, cand: Candidate) -> bool:
        """:meth:`check`'s verdict alone."""
        facts = cand.facts
        until = facts.cooled_down_until
        if (until is not None and until > ctx.now) or not facts.healthy:
            return False
        cap = self.args.max_error_rate
        return cap is None or not cand.live.error_rate > cap

    def check(self, ctx: RouteContext, cand: Candidate) -> Check:
        """Pass a healthy deployment; badness of a failed one is when it last failed."""
        facts, live = cand.facts, cand.live
        badness = _failure_time(cand)
        until = facts.cooled_down_until
        if until is not None and until > ctx.now:
            return Check(False, f"cooling down {until - ctx.now:.1f}s more", badness)
        if facts.draining:
            return Check(False, "draining", badness)
        if not facts.healthy:
            return Check(False, "marked unhealthy", badness)
        cap = self.args.max_error_rate
        if cap is not None and live.error_rate > cap:
            return Check(False, f"error rate {live.error_rate:.0%} > {cap:.0%}", badness)
        return Check(True, "ok")


def _breaker_state(cand: Candidate) -> tuple[bool, float | None]:
    facts = cand.facts
    return facts.healthy, facts.cooled_down_until


def _failure_time(cand: Candidate) -> float:
    facts = cand.facts
    if facts.last_failure_at is not None:
        return facts.last_failure_at
    if facts.cooled_down_until is not None:
        return facts.cooled_down_until
    return -math.inf


class Capable(FilterStep):
    """Drop deployments lacking a needed feature or too short a context window."""

    name = "capable"
    args_model = NoArgs
    reads_live = False

    def __init__(self, args: NoArgs | None = None) -> None:
        self.args = args or NoArgs()
        self.kind_of = _capabilities

    def passes(self, ctx: RouteContext, cand: Candidate) -> bool:
        """:meth:`check`'s verdict alone."""
        req, caps = ctx.request, cand.facts.capabilities
        if (
            (req.needs_tools and not caps.tools)
            or (req.needs_json_schema and not caps.json_schema)
            or (req.has_images and not caps.reads("image_url"))
            or (req.content_parts and not all(map(caps.reads, req.content_parts)))
        ):
            return False
        context = caps.context_length
        return context is None or not req.prompt_tokens + caps.budget(req.max_tokens) > context

    def check(self, ctx: RouteContext, cand: Candidate) -> Check:
        """Check tools, json_schema, images, other content parts and prompt + max_tokens
        against the context (configured, or learned from the deployment's own rejection of
        a longer prompt)."""
        req, caps = ctx.request, cand.facts.capabilities
        missing = [
            feature
            for feature, needed, has in (
                ("tools", req.needs_tools, caps.tools),
                ("json_schema", req.needs_json_schema, caps.json_schema),
                ("images", req.has_images, caps.reads("image_url")),
            )
            if needed and not has
        ]
        missing += [
            f"{kind} parts"
            for kind in sorted(req.content_parts)
            if not caps.reads(kind) and not (kind == "image_url" and req.has_images)
        ]
        if missing:
            return Check(False, "no " + ", ".join(missing))
        need = req.prompt_tokens + caps.budget(req.max_tokens)
        if caps.context_length is not None and need > caps.context_length:
            learned = " (learned)" if caps.context_learned else ""
            return Check(False, f"needs {need} tokens > context {caps.context_length}{learned}")
        return Check(True, "ok")


def _capabilities(cand: Candidate) -> Capabilities:
    return cand.facts.capabilities


class FitsMemoryArgs(BaseModel):
    """``fits_memory: {allow: [fits]}``; by default everything that can load is allowed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allow: tuple[FitClass, ...] = ("fits", "kv_spills", "partial_offload")


class FitsMemory(FilterStep):
    """Drop deployments whose planned memory fit is not allowed (unplanned ones pass)."""

    name = "fits_memory"
    args_model = FitsMemoryArgs
    reads_live = False

    def __init__(self, args: FitsMemoryArgs | None = None) -> None:
        self.args = args or FitsMemoryArgs()
        self.kind_of = _fit

    def passes(self, ctx: RouteContext, cand: Candidate) -> bool:
        """:meth:`check`'s verdict alone."""
        fit = cand.facts.fit
        return fit is None or fit in self.args.allow

    def check(self, ctx: RouteContext, cand: Candidate) -> Check:
        """Pass when the planner's fit class is allowed or there is no plan (remote API)."""
        fit = cand.facts.fit
        if fit is None:
            return Check(True, "no plan (remote or unplanned)")
        return Check(fit in self.args.allow, fit)

    def describe(self) -> str:
        """The step with its non-default allow-list."""
        if self.args.allow == FitsMemoryArgs().allow:
            return self.name
        return f"{self.name}(allow={','.join(self.args.allow)})"


def _fit(cand: Candidate) -> FitClass | None:
    return cand.facts.fit


class WithinBudgetArgs(BaseModel):
    """``within_budget: {max_usd_per_request: 0.01}`` and/or ``max_usd_per_1m_tokens``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_usd_per_request: float | None = Field(default=None, ge=0)
    max_usd_per_1m_tokens: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_limit(self) -> WithinBudgetArgs:
        if self.max_usd_per_request is None and self.max_usd_per_1m_tokens is None:
            raise ValueError("set max_usd_per_request or max_usd_per_1m_tokens")
        return self


class WithinBudget(FilterStep):
    """Drop deployments whose estimated cost exceeds a cap (unpriced ones pass)."""

    name = "within_budget"
    args_model = WithinBudgetArgs

    def __init__(self, args: WithinBudgetArgs) -> None:
        self.args = args

    def check(self, ctx: RouteContext, cand: Candidate) -> Check:
        """Compare the estimated request cost, and its per-1M-token rate, with the caps."""
        cost = estimate_cost_usd(ctx.request, cand)
        if cost is None:
            return Check(True, "cost unknown")
        tokens = ctx.request.prompt_tokens + ctx.request.output_tokens
        per_1m = cost / tokens * 1e6 if tokens else 0.0
        cap_req, cap_1m = self.args.max_usd_per_request, self.args.max_usd_per_1m_tokens
        if cap_req is not None and cost > cap_req:
            return Check(False, f"${cost:.6f} > ${cap_req:.6f}/request")
        if cap_1m is not None and per_1m > cap_1m:
            return Check(False, f"${per_1m:.3f}/1M > ${cap_1m:.3f}/1M")
        return Check(True, f"${cost:.6f}")
