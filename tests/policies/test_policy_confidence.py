"""Confidence scorers, the cascade rule and the tool-call argument tokens."""

from __future__ import annotations

import math

import pytest

from policies import CascadeRule, QuantileScorer, confidence
from policies.confidence import argument_tokens


def test_mean_is_the_geometric_mean_token_probability() -> None:
    probs = [0.9, 0.5, 0.8]
    expected = math.prod(probs) ** (1 / 3)
    assert confidence([math.log(p) for p in probs]) == pytest.approx(expected)
    assert confidence([]) is None


def test_quantile_zero_is_the_least_likely_token_and_interpolates_above() -> None:
    logprobs = [math.log(p) for p in (0.9, 0.2, 0.6, 0.99, 0.7)]
    assert confidence(logprobs, QuantileScorer(quantile=0)) == pytest.approx(0.2)
    assert confidence(logprobs, QuantileScorer(quantile=1)) == pytest.approx(0.99)
    # sorted 0.2 0.6 0.7 0.9 0.99: q=0.1 lies 40% of the way from 0.2 to 0.6
    assert confidence(logprobs, QuantileScorer(quantile=0.1)) == pytest.approx(0.36)


def test_the_rule_serves_at_or_above_the_threshold_and_never_an_unjudged_answer() -> None:
    rule = CascadeRule(min_confidence=0.6)
    assert rule.sure(0.6) and not rule.sure(0.59) and not rule.sure(None)
    assert rule.max_escalations == 1 and rule.scorer == "mean"
    peek = CascadeRule.model_validate(
        {"min_confidence": 0.5, "scorer": {"quantile": 0.1}, "judge_tokens": 16}
    )
    assert peek.describe() == "quantile(0.1) >= 0.50 on the first 16 tokens of a stream"
    with pytest.raises(ValueError):
        CascadeRule.model_validate({"min_confidence": 1.5})
    with pytest.raises(ValueError):
        CascadeRule.model_validate({"min_confidence": 0.5, "scorer": "median"})


def test_argument_tokens_are_the_values_of_the_call_arguments() -> None:
    tokens = [
        "<tool_call>", '{"', "name", '":', ' "', "get", "_weather", '",', ' "', "arguments",
        '":', ' {"', "city", '":', ' "', "Par", "is", '",', ' "', "days", '":', " 3", "}}",
        "</tool_call>",
    ]  # fmt: skip
    kept = [tokens[i] for i in argument_tokens(tokens)]
    assert kept == ["Par", "is", " 3"]


def test_bare_json_calls_and_empty_arguments() -> None:
    bare = ['[{"', "city", '":', ' "', "Oslo", '"}]']
    assert [bare[i] for i in argument_tokens(bare)] == ["Oslo"]
    empty = ['{"name": "now", "arguments": {}}']
    assert argument_tokens(empty) == [0]  # nothing to single out: the call is judged whole
