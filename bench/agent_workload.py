"""The agent sessions ``bench/agent_replay.py`` replays: generated, deterministic for a seed.

Every session shares one system prompt (a coding agent's instructions and its tool list,
rendered as text). Each turn sends the whole history again: the previous turn's recorded
assistant answer, a tool result of a few hundred tokens and a new user message on top. The
recorded answers are part of the trace, so every policy replays the very same requests
whatever the engines answer (``max_tokens`` is the recorded answer's length). Sessions
start in bursts (``burst_size`` within ``stagger_s`` of each other, then ``burst_gap_s`` of
lull); a turn goes ``think_s`` after the previous answer ended (the tool ran).

Lengths are in words of :data:`gateway.loadgen.workload.WORDS` (one token each in
Llama-style vocabularies), so a text of N words is about N tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from gateway.loadgen.workload import synth_text

TOOLS = (
    "read_file", "write_file", "list_dir", "grep", "run_tests", "run_shell", "git_diff",
    "git_log", "open_url", "search_docs", "edit_range", "format_code",
)  # fmt: skip
MESSAGE_OVERHEAD_TOKENS = 4  # role markers a chat template adds per message


@dataclass(frozen=True)
class Shape:
    """The workload's shape; lengths in tokens (words), times in seconds."""

    sessions: int = 16
    turns: tuple[int, int] = (8, 12)
    burst_size: int = 8
    burst_gap_s: float = 45.0
    stagger_s: float = 1.5
    burst_window_s: float = 8.0
    system_tokens: int = 400
    tool_result_tokens: tuple[int, int] = (25, 60)
    user_tokens: tuple[int, int] = (6, 16)
    answer_tokens: tuple[int, int] = (6, 16)
    think_s: tuple[float, float] = (0.3, 1.0)
    seed: int = 7

    def __post_init__(self) -> None:
        for name in ("turns", "tool_result_tokens", "user_tokens", "answer_tokens", "think_s"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"{name}: need 0 < low <= high, got {low}, {high}")
        if self.sessions < 1 or self.burst_size < 1:
            raise ValueError("sessions and burst_size must be at least 1")


@dataclass(frozen=True)
class Turn:
    """One request of a session: the whole history so far and the answer's length."""

    session: int
    index: int
    messages: tuple[dict[str, str], ...]
    max_tokens: int
    think_s: float

    @property
    def prompt_tokens(self) -> int:
        """Estimated prompt tokens: words plus each message's role markers."""
        return count_tokens(self.messages)


@dataclass(frozen=True)
class Session:
    """A session: when it starts (seconds from the run's start), its burst, its turns."""

    index: int
    start_s: float
    burst: int
    turns: tuple[Turn, ...] = field(repr=False)


def count_tokens(messages: tuple[dict[str, str], ...] | list[dict[str, Any]]) -> int:
    """Prompt tokens as the bench counts them everywhere (the fallback API bills this)."""
    words = sum(len(str(m.get("content", "")).split()) for m in messages)
    return words + MESSAGE_OVERHEAD_TOKENS * len(messages)


def system_prompt(shape: Shape) -> str:
    """The shared system prompt: instructions, then one paragraph per tool."""
    rng = random.Random(f"system-{shape.seed}")
    per_tool = max(8, shape.system_tokens // (len(TOOLS) + 2))
    lines = ["You are a coding agent working in a repository. " + synth_text(rng, per_tool)]
    lines.append("Tools you may call, with their arguments:")
    for tool in TOOLS:
        lines.append(f"- {tool}(path, query, limit): {synth_text(rng, per_tool)}")
    return "\n".join(lines)


def _between(rng: random.Random, bounds: tuple[int, int]) -> int:
    return rng.randint(bounds[0], bounds[1])


def _session(shape: Shape, index: int, start_s: float, system: str) -> Session:
    rng = random.Random(f"session-{shape.seed}-{index}")
    history: list[dict[str, str]] = [{"role": "system", "content": system}]
    turns: list[Turn] = []
    answer = ""
    for t in range(_between(rng, shape.turns)):
        if t:
            tool = rng.choice(TOOLS)
            result = synth_text(rng, _between(rng, shape.tool_result_tokens))
            history.append({"role": "assistant", "content": answer})
            asked = synth_text(rng, _between(rng, shape.user_tokens))
            user = f"[{tool} returned]\n{result}\n\n{asked}"
        else:
            user = f"Task {index}: " + synth_text(rng, _between(rng, shape.user_tokens))
        history.append({"role": "user", "content": user})
        length = _between(rng, shape.answer_tokens)
        answer = synth_text(rng, length)  # the recorded answer, sent back next turn
        think = 0.0 if t == 0 else rng.uniform(*shape.think_s)
        turns.append(Turn(index, t, tuple(history), length, think))
    return Session(index, start_s, index // shape.burst_size, tuple(turns))


def sessions(shape: Shape) -> list[Session]:
    """Every session of the workload, in start order; the same shape gives the same list."""
    rng = random.Random(f"arrivals-{shape.seed}")
    system = system_prompt(shape)
    out = []
    for i in range(shape.sessions):
        burst = i // shape.burst_size
        start = burst * shape.burst_gap_s + rng.uniform(0.0, shape.stagger_s)
        out.append(_session(shape, i, start, system))
    return sorted(out, key=lambda s: (s.start_s, s.index))


def in_burst(shape: Shape, sent_s: float) -> bool:
    """Whether a request sent at ``sent_s`` falls in a burst's first ``burst_window_s``."""
    bursts = (shape.sessions + shape.burst_size - 1) // shape.burst_size
    return any(0.0 <= sent_s - b * shape.burst_gap_s <= shape.burst_window_s for b in range(bursts))
