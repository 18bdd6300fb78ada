"""The scheduler's bookkeeping: a submitted job (:class:`Ticket`), a job running in a
sequence (:class:`Task`) and a llama.cpp sequence with the tokens its KV holds (:class:`Seq`).
Only the scheduler thread changes a :class:`Task` or a :class:`Seq`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from backends.llamacpp.sampling import Event, GenerationJob, SamplerChain
from backends.llamacpp.text import TextAssembler

Deliver = Callable[[Event | BaseException], None]


@dataclass(eq=False)
class Ticket:
    """A submitted job with what the scheduler needs to run it; whoever takes it off the
    wait queue owns (and frees) its sampler chain."""

    job: GenerationJob
    chain: SamplerChain
    deliver: Deliver
    submitted: float = field(default_factory=time.perf_counter)


class Task:
    """A job running in a sequence."""

    __slots__ = (
        *("cached", "count", "first_token_s", "held", "next_token", "order", "out", "text"),
        "ticket",
    )

    def __init__(self, ticket: Ticket, order: int, cached: int) -> None:
        self.ticket = ticket
        self.order = order
        self.cached = cached
        self.text = TextAssembler(ticket.job.stops)
        self.next_token: int | None = None  # sampled, to be decoded in the next step
        self.count = 0
        self.first_token_s: float | None = None
        self.out = -1  # batch index of this task's logits in the current step
        self.held: list[str] | None = None if ticket.job.stream else []

    @property
    def prompt(self) -> list[int]:
        return self.ticket.job.prompt_tokens


class Seq:
    """A llama.cpp sequence: the tokens its KV holds (positions 0..n-1) and its task."""

    __slots__ = ("id", "task", "tokens")

    def __init__(self, seq_id: int) -> None:
        self.id = seq_id
        self.tokens: list[int] = []
        self.task: Task | None = None
