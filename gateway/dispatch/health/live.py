"""Live figures per deployment, measured by the gateway itself.

Every attempt on a deployment is tracked from dispatch to its end: time to first token,
inter-token latency, how long it held the deployment, whether it failed, and how many
prompt tokens are still waiting for their first token there. Engines add their own figures
(slots, KV, queue) through ``Backend.stats()``. The result is ``policies.LiveFigures``.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from backends.base import LiveStats
from gateway.dispatch.health.sent import SentPrefixes
from policies import LiveFigures

ALPHA = 0.2  # EWMA weight of the newest sample: about the last ten requests matter
WINDOW_S = 30.0
TOKENS_PER_CHAR = (0.05, 4.0)
"""The range a calibrated tokens-per-character ratio is held to (a report is never trusted
past what any tokenizer does)."""
PROMPT_RATIO = (0.05, 1000.0)
"""The range a reported-to-estimated prompt ratio is held to: a provider's own system
prompt, a template or a document can make an upstream count hundreds of times the text."""
SESSIONS_REMEMBERED = 4096
"""Sessions whose last reported prompt one deployment remembers (the oldest go first)."""


def _ewma(current: float | None, sample: float) -> float:
    return sample if current is None else current + ALPHA * (sample - current)


@dataclass
class Attempt:
    """One request on one deployment; report its first token and its end."""

    tracker: DeploymentTracker
    prompt_tokens: int
    """Its prompt as the gateway estimated it (what a reported count is compared with)."""
    started: float
    first_token_at: float | None = None
    done: bool = False
    session: str | None = None
    backlog_tokens: int = 0
    """Its tokens in the deployment's prefill backlog (what the engine does not hold)."""

    def first_token(self) -> None:
        if self.first_token_at is None:
            self.first_token_at = self.tracker.clock()
            self.tracker.on_first_token(self)

    def finish(
        self, completion_tokens: int | None, failed: bool = False, prompt_tokens: int | None = None
    ) -> None:
        """The end of the attempt; ``prompt_tokens``: what the upstream reported counting."""
        if not self.done:
            self.done = True
            self.tracker.on_finish(self, completion_tokens, failed)
            if prompt_tokens and not failed:
                self.tracker.learn_prompt(self.prompt_tokens, prompt_tokens, self.session)


@dataclass
class DeploymentTracker:
    clock: Callable[[], float] = time.monotonic
    ewma_ttft_ms: float | None = None
    ewma_itl_ms: float | None = None
    ewma_service_ms: float | None = None
    error_rate: float = 0.0
    in_flight: int = 0
    prefill_backlog_tokens: int = 0
    _departures: deque[list[int]] = field(default_factory=deque)
    """Successful requests per whole second of the last ``WINDOW_S``, as ``[second,
    count]``: trimmed on every write, so its size holds at any request rate."""
    _departed: int = 0
    peers: list[dict[str, float | None]] = field(default_factory=list)
    """Other replicas' averages of this deployment (ewma_ttft_ms, ewma_itl_ms, ...)."""
    sent: SentPrefixes = field(init=False, repr=False)
    _born: float = field(init=False, repr=False)
    """Prefix links of requests sent here lately, held before the engine reports them."""
    tokens_per_char: float | None = None
    """The engine's tokens per character of prompt content, an EWMA over its reports."""
    prompt_ratio: float | None = None
    """Prompt tokens the deployment reports per token the gateway estimated, an EWMA."""
    _session_prompts: OrderedDict[str, int] = field(default_factory=OrderedDict, repr=False)
    """The prompt tokens it last reported for each recent session."""
    kv_bytes_per_token: float | None = None
    """One token's KV state here in bytes, learned from moves (the engine's word before)."""
    kv_move_bytes_per_s: float | None = None
    """The transfer rate of KV moves into this deployment, an EWMA."""
    kv_import_bytes_per_s: float | None = None
    """The rate of its imports of moved KV (their own time), an EWMA."""
    _calibrated_on: object = field(default=None, repr=False)
    """The engine's last report of held links calibrated from (the same object while it
    has not changed)."""
    _last: tuple[tuple[object, ...], LiveFigures] | None = field(default=None, repr=False)
    """The figures last built and what they were built from: routing asks for every
    candidate's figures per request, and most have not changed since."""

    def __post_init__(self) -> None:
        self.sent = SentPrefixes(self.clock)
        self._born = self.clock()

    def begin(
        self,
        prompt_tokens: int,
        chain: Sequence[tuple[str, int]] = (),
        session: str | None = None,
    ) -> Attempt:
        self.in_flight += 1
        backlog = self._uncached(prompt_tokens, chain)
        self.prefill_backlog_tokens += backlog
        self.sent.record(chain, prompt_tokens)
        return Attempt(self, prompt_tokens, self.clock(), session=session, backlog_tokens=backlog)

    def learn_prompt(self, estimated: int, reported: int, session: str | None = None) -> None:
        """The deployment counted ``reported`` prompt tokens where the gateway estimated
        ``estimated``: fold the ratio into :attr:`prompt_ratio`, and remember the size as
        ``session``'s last."""
        low, high = PROMPT_RATIO
        sample = min(max(reported / max(estimated, 1), low), high)
        self.prompt_ratio = _ewma(self.prompt_ratio, sample)
        if session is not None:
            sessions = self._session_prompts
            sessions[session] = reported
            sessions.move_to_end(session)
            while len(sessions) > SESSIONS_REMEMBERED:
                sessions.popitem(last=False)

    def expected_prompt(self, estimated: int, session: str | None = None) -> int:
        """The prompt tokens this deployment is expected to count for a request estimated
        at ``estimated``: never less than the estimate, the estimate at the learned ratio
        (this replica's and its peers', the larger), and at least what it last reported
        for ``session`` (a conversation only grows)."""
        ratios = [r for r in (self.prompt_ratio, *(p.get("prompt_ratio") for p in self.peers)) if r]
        expected = estimated
        if ratios:
            # rounded first: an EWMA near 1.0 must not add a token to every request
            expected = max(expected, math.ceil(round(estimated * max(ratios), 6)))
        if session is not None:
            expected = max(expected, self._session_prompts.get(session, 0))
        return expected

    def _uncached(self, prompt_tokens: int, chain: Sequence[tuple[str, int]]) -> int:
        """The part of a prompt the engine must prefill: what the figures last built say it
        does not hold, by share of characters. A follow-up turn mostly cached there adds
        its new tokens to the backlog, not its whole history."""
        last = self._last
        if last is None or not chain or chain[-1][1] <= 0:
            return prompt_tokens
        held = last[1].held_prefixes
        for link, chars in reversed(chain):
            if link in held:
                return math.ceil(prompt_tokens * (1.0 - chars / chain[-1][1]))
        return prompt_tokens

    def learn_move(self, n_bytes: int, tokens: int, transfer_s: float, import_s: float) -> None:
        """A move of ``n_bytes`` (``tokens``) into this deployment took ``transfer_s`` on
        the wire and ``import_s`` in the engine: fold its rates into the EWMAs."""
        if tokens > 0:
            self.kv_bytes_per_token = n_bytes / tokens
        if transfer_s > 0:
            self.kv_move_bytes_per_s = _ewma(self.kv_move_bytes_per_s, n_bytes / transfer_s)
        if import_s > 0:
            self.kv_import_bytes_per_s = _ewma(self.kv_import_bytes_per_s, n_bytes / import_s)

    def on_first_token(self, attempt: Attempt) -> None:
        assert attempt.first_token_at is not None
        self.prefill_backlog_tokens -= attempt.backlog_tokens
        self.ewma_ttft_ms = _ewma(
            self.ewma_ttft_ms, (attempt.first_token_at - attempt.started) * 1000
        )

    def on_finish(self, attempt: Attempt, completion_tokens: int | None, failed: bool) -> None:
        now = self.clock()
        self.in_flight -= 1
        if attempt.first_token_at is None:
            self.prefill_backlog_tokens -= attempt.backlog_tokens
        self.error_rate = _ewma(self.error_rate, 1.0 if failed else 0.0)
        if failed:
            return
        self.ewma_service_ms = _ewma(self.ewma_service_ms, (now - attempt.started) * 1000)
        if attempt.first_token_at is not None and completion_tokens and completion_tokens > 1:
            itl = (now - attempt.first_token_at) * 1000 / (completion_tokens - 1)
            self.ewma_itl_ms = _ewma(self.ewma_itl_ms, itl)
        self._depart(now)

    def _depart(self, now: float) -> None:
        second = int(now)
        if self._departures and self._departures[-1][0] == second:
            self._departures[-1][1] += 1
        else:
            self._departures.append([second, 1])
        self._departed += 1
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._departures and now - self._departures[0][0] > WINDOW_S:
            self._departed -= self._departures.popleft()[1]

    def _departure_rate(self, now: float) -> float | None:
        """Departures per second over the window, or over the time since this tracker
        began when that is shorter (a new deployment's first seconds are not idle ones)."""
        if not self._departed:
            return None
        return self._departed / max(min(WINDOW_S, now - self._born), 1.0)

    def averages(self) -> dict[str, float | None]:
        """What this replica shares with the others."""
        return {
            "ewma_ttft_ms": self.ewma_ttft_ms,
            "ewma_itl_ms": self.ewma_itl_ms,
            "ewma_service_ms": self.ewma_service_ms,
            "prompt_ratio": self.prompt_ratio,
        }

    def _blend(self, name: str, own: float | None) -> float | None:
        values = [v for v in (own, *(p.get(name) for p in self.peers)) if v is not None]
        return sum(values) / len(values) if values else None

    def _calibrate(self, reported: Mapping[str, int]) -> None:
        """Fold a new report's tokens per character into the EWMA (once per report)."""
        if reported is self._calibrated_on:
            return
        self._calibrated_on = reported
        sample = self.sent.calibrate(reported)
        if sample is not None:
            low, high = TOKENS_PER_CHAR
            self.tokens_per_char = _ewma(self.tokens_per_char, min(max(sample, low), high))

    def figures(self, engine: LiveStats) -> LiveFigures:
        now = self.clock()
        self._trim(now)
        self.sent.expire()
        self._calibrate(engine.held_prefixes)
        inputs = (
            self.ewma_ttft_ms,
            self.ewma_itl_ms,
            self.ewma_service_ms,
            self.error_rate,
            self.in_flight,
            self.prefill_backlog_tokens,
            self._departed,
            int(min(now - self._born, WINDOW_S)),
            self.peers,
            self.sent.version,
            self.tokens_per_char,
            self.kv_bytes_per_token,
            self.kv_move_bytes_per_s,
            self.kv_import_bytes_per_s,
            engine,
        )
        last = self._last
        if last is not None and last[0] == inputs:
            return last[1]
        figures = LiveFigures(
            ewma_ttft_ms=self._blend("ewma_ttft_ms", self.ewma_ttft_ms),
            ewma_itl_ms=self._blend("ewma_itl_ms", self.ewma_itl_ms),
            ewma_service_ms=self._blend("ewma_service_ms", self.ewma_service_ms),
            departures_per_s=self._departure_rate(now),
            error_rate=self.error_rate,
            in_flight=max(self.in_flight, engine.in_flight),
            queue_depth=engine.queue_depth,
            slots_busy=engine.slots_busy,
            slots_total=engine.slots_total,
            kv_used=engine.kv_used,
            kv_total=engine.kv_total,
            prefill_tokens_per_s=engine.prefill_tokens_per_s,
            decode_tokens_per_s=engine.decode_tokens_per_s,
            prefill_backlog_tokens=max(0, self.prefill_backlog_tokens),
            queue_limit=engine.queue_limit,
            held_prefixes=self.sent.over(engine.held_prefixes, self.tokens_per_char),
            tokens_per_char=self.tokens_per_char,
            kv_fingerprint=engine.kv_fingerprint,
            kv_bytes_per_token=self.kv_bytes_per_token or engine.kv_bytes_per_token,
            kv_move_bytes_per_s=self.kv_move_bytes_per_s,
            kv_import_bytes_per_s=self.kv_import_bytes_per_s,
        )
        self._last = inputs, figures
        return figures
