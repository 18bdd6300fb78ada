"""Routing policies: pure functions over plain data → candidates in order, with reasons.

Typical use by the gateway::

    policy = Policy.parse(["healthy", "capable", {"slo": {"ttft_ms": 500}}, "cheapest"])
    decision = policy.route(RequestFacts(prompt_tokens=812, max_tokens=256), candidates, now=t)
    decision.names        # try in this order
    decision.reason()     # one line for the x-shunter-route header
    decision.rows()       # every filter verdict and score, for an explain view

No I/O and no imports from ``gateway`` or ``backends``.
"""

from policies.confidence import CascadeRule, QuantileScorer, Scorer, confidence
from policies.facts import (
    DEFAULT_OUTPUT_TOKENS,
    FIT_CLASSES,
    Candidate,
    CandidateFacts,
    Capabilities,
    FitClass,
    LiveFigures,
    Pricing,
    RequestFacts,
)
from policies.outcome import Decision, ExplainRow, Hedge, Ranked, StepNote
from policies.policy import DEFAULT_POLICY, Policy, PolicyField, coerce_policy
from policies.pool import Pool
from policies.predict import (
    estimate_cost_usd,
    predict_total_ms,
    predict_tpot_ms,
    predict_ttft_ms,
    queue_wait_ms,
    token_prices,
)
from policies.registry import Primitive, builtin_primitives
from policies.size import describe_size, format_params
from policies.steps import Check, FilterStep, RankStep, RouteContext, Score, Step

__all__ = [
    "DEFAULT_OUTPUT_TOKENS",
    "DEFAULT_POLICY",
    "FIT_CLASSES",
    "Candidate",
    "CandidateFacts",
    "Capabilities",
    "CascadeRule",
    "Check",
    "Decision",
    "ExplainRow",
    "FilterStep",
    "FitClass",
    "Hedge",
    "LiveFigures",
    "Policy",
    "PolicyField",
    "Pool",
    "Pricing",
    "Primitive",
    "QuantileScorer",
    "RankStep",
    "Ranked",
    "RequestFacts",
    "RouteContext",
    "Score",
    "Scorer",
    "Step",
    "StepNote",
    "builtin_primitives",
    "coerce_policy",
    "confidence",
    "describe_size",
    "estimate_cost_usd",
    "format_params",
    "predict_total_ms",
    "predict_tpot_ms",
    "predict_ttft_ms",
    "queue_wait_ms",
    "token_prices",
]
