"""What a benchmark sends: length distributions, synthetic prompts, levels and bounds."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

DistKind = Literal["fixed", "uniform", "normal"]
LevelMode = Literal["concurrency", "rate"]

# Short, common English words: one token each in GPT-2/Llama/Qwen-style BPE vocabularies
# (with their leading space), so a prompt of N words is roughly N tokens.
_WORDS = (
    "the of and to in is was for on that with as by at from his it an were are which this be "
    "or has had not first one their its new after but who they have her she two been other "
    "when there all during into school time may years more most only over city some world "
    "would where later up such used many can state about national out known university "
    "united then made age year part would while these under film since both three well we "
    "war high through than south team north being out name same house home album west music "
    "family most made game century group season series long will own day life work line east "
    "club end public local early back down area each another government because small "
    "number general original against named did found however population between second last"
)
WORDS = tuple(dict.fromkeys(_WORDS.split()))


class WorkloadError(ValueError):
    """A workload or level specification that cannot be run."""


@dataclass(frozen=True)
class Distribution:
    """A token-length distribution: ``fixed`` (``a``), ``uniform`` on [a, b] or ``normal``
    (mean ``a``, standard deviation ``b``). Samples are whole numbers, at least 1."""

    kind: DistKind
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> Distribution:
        """Parse ``128``, ``fixed:128``, ``uniform:64-256`` (or ``64,256``), ``normal:128,32``."""
        kind, _, rest = spec.strip().partition(":")
        if not rest:
            kind, rest = "fixed", kind
        numbers = [p for p in re.split(r"[,-]", rest) if p.strip()]
        try:
            values = [float(p) for p in numbers]
        except ValueError:
            raise WorkloadError(f"bad length distribution {spec!r}: numbers expected") from None
        if kind == "fixed" and len(values) == 1 and values[0] >= 1:
            return cls("fixed", values[0])
        if kind == "uniform" and len(values) == 2 and 1 <= values[0] <= values[1]:
            return cls("uniform", values[0], values[1])
        if kind == "normal" and len(values) == 2 and values[0] >= 1 and values[1] >= 0:
            return cls("normal", values[0], values[1])
        raise WorkloadError(
            f"bad length distribution {spec!r}: use N, fixed:N, uniform:LOW-HIGH or "
            "normal:MEAN,STDDEV (lengths at least 1)"
        )

    def sample(self, rng: random.Random) -> int:
        """One length drawn from the distribution (``normal`` is clipped at 1)."""
        if self.kind == "fixed":
            value = self.a
        elif self.kind == "uniform":
            value = rng.uniform(self.a, self.b)
        else:
            value = rng.gauss(self.a, self.b)
        return max(1, round(value))

    @property
    def mean(self) -> float:
        """The distribution's mean (before rounding and clipping)."""
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"{self.a:g}"
        sep = "-" if self.kind == "uniform" else ","
        return f"{self.kind}:{self.a:g}{sep}{self.b:g}"


@dataclass(frozen=True)
class Level:
    """One point of a sweep: a fixed number of concurrent clients, or a Poisson arrival rate."""

    mode: LevelMode
    value: float

    @property
    def label(self) -> str:
        """``c=4`` or ``rate=2/s``."""
        return f"c={self.value:g}" if self.mode == "concurrency" else f"rate={self.value:g}/s"


def parse_levels(concurrency: str | None, rate: str | None) -> list[Level]:
    """Levels from ``--concurrency 1,4,8`` or ``--rate 0.5,2`` (not both; default ``c=1``)."""
    if concurrency is not None and rate is not None:
        raise WorkloadError("give --concurrency or --rate, not both")
    mode: LevelMode = "rate" if rate is not None else "concurrency"
    spec = rate if rate is not None else (concurrency or "1")
    levels: list[Level] = []
    for part in spec.split(","):
        try:
            value = float(part)
        except ValueError:
            raise WorkloadError(f"bad {mode} level {part!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise WorkloadError(f"{mode} levels must be positive, got {part!r}")
        if mode == "concurrency" and value != int(value):
            raise WorkloadError(f"concurrency must be a whole number, got {part!r}")
        levels.append(Level(mode, value))
    if not levels:
        raise WorkloadError("no levels given")
    return levels


@dataclass(frozen=True)
class Bounds:
    """When a level stops issuing requests: after ``duration_s`` seconds or ``max_requests``
    requests, whichever comes first. At least one must be set; requests in flight finish."""

    duration_s: float | None = None
    max_requests: int | None = None

    def __post_init__(self) -> None:
        if self.duration_s is None and self.max_requests is None:
            raise WorkloadError(
                "refusing to run unbounded: give --duration SECONDS and/or --max-requests N"
            )
        if self.duration_s is not None and not self.duration_s > 0:
            raise WorkloadError("--duration must be positive")
        if self.max_requests is not None and self.max_requests < 1:
            raise WorkloadError("--max-requests must be at least 1")


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: chat ``messages`` and ``max_tokens``."""

    index: int
    messages: list[dict[str, Any]]
    max_tokens: int
    prompt_words: int
    shared_prefix: bool


@dataclass(frozen=True)
class Workload:
    """The request mix. Prompts are synthetic text of roughly ``prompt_tokens`` tokens; a
    ``shared_prefix_ratio`` fraction of requests also start with one common system prompt of
    ``shared_prefix_tokens`` tokens (on top of their own prompt). The same ``seed`` always
    gives the same sequence of requests."""

    prompt_tokens: Distribution
    output_tokens: Distribution
    shared_prefix_ratio: float = 0.0
    shared_prefix_tokens: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.shared_prefix_ratio <= 1.0:
            raise WorkloadError("--shared-prefix-ratio must be between 0 and 1")
        if self.shared_prefix_tokens < 1:
            raise WorkloadError("--shared-prefix-tokens must be at least 1")

    def shared_prefix(self) -> str:
        """The common system prompt (the same for a given seed)."""
        rng = random.Random(f"prefix-{self.seed}")
        return "You are a helpful assistant. " + synth_text(rng, self.shared_prefix_tokens)

    def requests(self) -> Iterator[RequestSpec]:
        """An endless, deterministic stream of requests."""
        rng = random.Random(self.seed)
        prefix = self.shared_prefix() if self.shared_prefix_ratio > 0 else ""
        index = 0
        while True:
            words = self.prompt_tokens.sample(rng)
            max_tokens = self.output_tokens.sample(rng)
            shared = rng.random() < self.shared_prefix_ratio
            messages: list[dict[str, Any]] = []
            if shared:
                messages.append({"role": "system", "content": prefix})
            messages.append({"role": "user", "content": synth_text(rng, words)})
            yield RequestSpec(index, messages, max_tokens, words, shared)
            index += 1


def synth_text(rng: random.Random, n_tokens: int) -> str:
    """Random text of ``n_tokens`` common words (roughly that many tokens)."""
    return " ".join(rng.choices(WORDS, k=max(1, n_tokens)))


def poisson_gaps(rate: float, seed: int) -> Iterator[float]:
    """Endless exponential inter-arrival gaps (seconds) of a Poisson process at ``rate``/s."""
    rng = random.Random(f"arrivals-{seed}")
    while True:
        yield rng.expovariate(rate)
