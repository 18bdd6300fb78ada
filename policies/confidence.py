"""How sure an answer is, from its tokens' log-probabilities; and the ``cascade`` rule.

A cascade (``cascade: {min_confidence: 0.6}`` on a model) answers with the best-ranked
candidate first, asks it for token logprobs, and scores the answer:

* ``scorer: mean`` (default): ``exp(mean logprob)``, the geometric mean of the token
  probabilities. One unlikely token pulls it down only by its share of the answer.
* ``scorer: {quantile: q}``: the ``q``-quantile of the token probabilities (linear
  interpolation between order statistics); ``q = 0`` is the least likely token, so one
  guessed digit in a number sinks the whole answer.

At or above ``min_confidence`` the answer is served; below, the request goes to the next
candidate. An answer with no token logprobs at all cannot be judged and counts as unsure.

A tool call is judged on the tokens of its arguments' values only: the JSON around them
(braces, quotes, key names, the function name) is near-certain once the model has chosen
to call, and would lift any score towards 1. :func:`argument_tokens` picks those tokens
out of the raw call text, whatever wraps it (``<tool_call>``, ``[TOOL_CALLS]``, bare JSON).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ScorerName = Literal["mean"]


class QuantileScorer(BaseModel):
    """``scorer: {quantile: 0.1}``: the 10th-percentile token probability."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quantile: float = Field(ge=0, le=1)


Scorer = ScorerName | QuantileScorer


def describe_scorer(scorer: Scorer) -> str:
    """``mean`` or ``quantile(0.1)``."""
    return scorer if isinstance(scorer, str) else f"quantile({scorer.quantile:g})"


def confidence(logprobs: Sequence[float], scorer: Scorer = "mean") -> float | None:
    """The answer's confidence in [0, 1] from its tokens' logprobs; ``None`` when there is
    no token to judge."""
    if not logprobs:
        return None
    if isinstance(scorer, str):
        return math.exp(math.fsum(logprobs) / len(logprobs))
    return quantile([math.exp(lp) for lp in logprobs], scorer.quantile)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile of ``values`` (not empty), interpolating linearly."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


class CascadeRule(BaseModel):
    """``cascade:`` on a model: small first, a larger candidate when the answer is unsure.

    ``judge_tokens``: judge a stream on its first N tokens (then stream on, or escalate);
    unset, a stream is judged whole before any of it is sent. ``max_escalations``: how many
    times one request may move up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_confidence: float = Field(ge=0, le=1)
    scorer: Scorer = "mean"
    judge_tokens: int | None = Field(default=None, ge=1)
    max_escalations: int = Field(default=1, ge=1)

    def describe(self) -> str:
        """``mean >= 0.60``, ``quantile(0.1) >= 0.50 on the first 16 tokens``."""
        text = f"{describe_scorer(self.scorer)} >= {self.min_confidence:.2f}"
        if self.judge_tokens is not None:
            text += f" on the first {self.judge_tokens} tokens of a stream"
        return text

    def sure(self, score: float | None) -> bool:
        """Whether an answer with this confidence is served (``None``: no, unjudged)."""
        return score is not None and score >= self.min_confidence


def argument_tokens(tokens: Sequence[str]) -> list[int]:
    """Indexes of the tokens that carry a tool call's argument values.

    The tokens' text is scanned as JSON: inside the object under an ``"arguments"`` (or
    ``"parameters"``) key when there is one, else inside every object found. A token is
    kept when one of its characters belongs to a value (a string's content, a number,
    ``true``/``false``/``null``), not to a key or to punctuation. With no value at all
    (``{}``) every token is kept, so that the call is still judged."""
    text = "".join(tokens)
    marks = _value_chars(text)
    kept, at = [], 0
    for index, token in enumerate(tokens):
        if any(marks[at : at + len(token)]):
            kept.append(index)
        at += len(token)
    return kept or list(range(len(tokens)))


def _value_chars(text: str) -> list[bool]:
    """For each character of ``text``: is it part of an argument value?"""
    marks = [False] * len(text)
    start = _arguments_start(text)
    if start is not None:
        _scan(text, start, marks, once=True)
    else:
        at = text.find("{")
        while at >= 0:
            at = _scan(text, at, marks, once=True)
            at = text.find("{", at)
    return marks


def _arguments_start(text: str) -> int | None:
    for key in ('"arguments"', '"parameters"'):
        at = text.find(key)
        if at >= 0:
            brace = text.find("{", at + len(key))
            colon = text.find(":", at + len(key))
            if 0 <= colon < brace and not text[colon + 1 : brace].strip():
                return brace
    return None


def _scan(text: str, start: int, marks: list[bool], *, once: bool) -> int:
    """Mark value characters of the JSON value at ``start``; return where it ends."""
    stack: list[str] = []  # "{" (expecting a key next when the flag says so) or "["
    expect_key = False
    at = start
    while at < len(text):
        char = text[at]
        if char in "{[":
            stack.append(char)
            expect_key = char == "{"
        elif char in "}]":
            if stack:
                stack.pop()
            if not stack and once:
                return at + 1
            expect_key = False
        elif char == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        elif char == ":":
            expect_key = False
        elif char == '"':
            at = _string(text, at, marks, value=not expect_key)
            continue
        elif not char.isspace():
            marks[at] = not expect_key  # a number, true/false/null (or junk)
        at += 1
    return at


def _string(text: str, at: int, marks: list[bool], *, value: bool) -> int:
    """Skip the string opening at ``at`` (marking its content if a value); the index after
    its closing quote."""
    at += 1
    while at < len(text) and text[at] != '"':
        step = 2 if text[at] == "\\" else 1
        if value:
            for i in range(at, min(at + step, len(text))):
                marks[i] = True
        at += step
    return at + 1
