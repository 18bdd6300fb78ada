"""What the status page's last hour costs a request: :meth:`History.add` (the per-minute
counters a finished request feeds) against the whole :meth:`Telemetry.record` it runs in,
measured in the same sitting (CPU time of this process, so that other load on a shared
machine counts less), with the facts of a priced, streamed chat answer.

Run from the repository root::

    .venv/bin/python -m bench.history_cost [--calls 200000]

It prints nanoseconds per call for each (and, for scale, for the page's ring of the last
route decisions, which every request also feeds), and the share of ``record`` that the
history is.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gateway.telemetry.history import History
from gateway.telemetry.instruments import Telemetry
from gateway.telemetry.recent import RecentDecisions

FACTS = {
    "model": "chat",
    "deployment": "remote",
    "ttft_ms": 123.4,
    "prompt_tokens": 812,
    "completion_tokens": 96,
    "cost_usd": 0.000181,
    "key_id": "k_0123456789",
}


def per_call_ns(run: object, calls: int, rounds: int = 5) -> float:
    """The median over ``rounds`` of ``calls`` calls, in nanoseconds per call."""
    timings = []
    for _ in range(rounds):
        started = time.process_time_ns()
        for _ in range(calls):
            run()  # type: ignore[operator]
        timings.append((time.process_time_ns() - started) / calls)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    calls = parser.parse_args().calls
    history = History()
    telemetry = Telemetry()
    telemetry.configure(frozenset({"chat"}))
    add = per_call_ns(lambda: history.add(FACTS, "chat", 200, 0.84), calls)
    recent = RecentDecisions()
    ring = per_call_ns(
        lambda: recent.add("req_1", "chat", FACTS, "remote", "cheapest", 200, 0.84), calls
    )
    record = per_call_ns(lambda: telemetry.record(FACTS, 200, 0.84, "chat"), calls)
    print(f"History.add:         {add:5.0f} ns a request")
    print(f"RecentDecisions.add: {ring:5.0f} ns a request (the page's ring of decisions)")
    print(f"Telemetry.record:    {record:5.0f} ns a request (the history included)")
    print(f"history share of record: {add / record:.1%}")


if __name__ == "__main__":
    main()
