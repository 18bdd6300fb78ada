"""What a mid-stream resume costs the client: the gap at the resume point against the
continuing candidate's own time to first token, measured in the same sitting.

A real ``shunter serve`` fronts two fault-injecting upstreams on loopback (the test
fixture): ``a`` breaks its stream after ``--at`` chunks (a cut connection or an error
event), ``b`` answers after ``--ttft`` milliseconds. Each round, interleaved so that drift
on a shared machine hits both:

* ``b itself``: a stream asked of ``b`` directly, timed from the request to its first
  chunk: the candidate's own TTFT;
* ``via the gateway``: the same through a model whose only candidate is ``b``: its TTFT
  as a client of the gateway sees it;
* ``resumed``: a stream from a model with candidates ``a, b``, timed from the last chunk
  ``a`` delivered to the first one ``b`` continued with: what the client waits at the
  resume point.

The median gap minus ``b``'s own median TTFT is what the resume adds (noticing the
failure, reading back what was sent, opening the continuation, splicing it); the goal is
under 10 ms.

    .venv/bin/python -m bench.resume_latency [--rounds 50] [--ttft 50] [--at 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.conftest import start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

HELLO = [{"role": "user", "content": "hi"}]


def timed_lines(client: httpx.Client, url: str, model: str) -> list[tuple[float, str]]:
    """Each non-empty SSE line with its arrival time; the request's start time first."""
    body = {"model": model, "messages": HELLO, "stream": True}
    out = [(time.perf_counter(), "")]
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line:
                out.append((time.perf_counter(), line))
    return out


def direct_ttft(lines: list[tuple[float, str]]) -> float:
    started = lines[0][0]
    first = next(t for t, line in lines[1:] if line.startswith("data: {"))
    return first - started


def resume_gap(lines: list[tuple[float, str]]) -> float:
    at = next(i for i, (_, line) in enumerate(lines) if line.startswith(": resumed"))
    after = next(t for t, line in lines[at + 1 :] if line.startswith("data: {"))
    return after - lines[at - 1][0]


def ms(values: list[float]) -> str:
    cut = statistics.quantiles(values, n=10)
    return f"p50 {statistics.median(values) * 1e3:7.2f}  p90 {cut[-1] * 1e3:7.2f}"


def main(rounds: int, ttft_ms: int, at: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="resume-bench-"))
    with FaultUpstream() as a, FaultUpstream() as b:
        b.default_fault = f"ttft:{ttft_ms}"
        config = folder / "shunter.yaml"
        config.write_text(
            "deployments:\n"
            f"  - {{name: a, backend: openai, base_url: '{a.url}', model: up-a}}\n"
            f"  - {{name: b, backend: openai, base_url: '{b.url}', model: up-b}}\n"
            "models:\n  m: {candidates: [a, b]}\n  direct: {candidates: [b]}\n"
        )
        server = start_server(config, folder / "server.log")
        try:
            url, b_url = f"{server.api}/chat/completions", f"{b.url}/chat/completions"
            with httpx.Client(timeout=30) as client:
                for _ in range(3):  # warm-up: connections, first-request imports
                    timed_lines(client, url, "direct")
                    a.queue.append(f"cut:{at}")
                    timed_lines(client, url, "m")
                upstream: list[float] = []
                direct: list[float] = []
                gaps: dict[str, list[float]] = {"cut": [], "error": []}
                for _ in range(rounds):
                    upstream.append(direct_ttft(timed_lines(client, b_url, "up-b")))
                    direct.append(direct_ttft(timed_lines(client, url, "direct")))
                    for fault, found in gaps.items():
                        a.queue.append(f"{fault}:{at}")
                        found.append(resume_gap(timed_lines(client, url, "m")))
        finally:
            stop_server(server)
    print(f"rounds {rounds}, b's ttft {ttft_ms} ms, a fails after {at} chunks (ms)")
    print(f"  TTFT of b itself          {ms(upstream)}")
    print(f"  TTFT of b via the gateway {ms(direct)}")
    own, via = statistics.median(upstream), statistics.median(direct)
    for fault, found in gaps.items():
        gap = statistics.median(found)
        print(
            f"  resume gap, {fault:<5}         {ms(found)}  over b itself "
            f"{(gap - own) * 1e3:+.2f}, over b via the gateway {(gap - via) * 1e3:+.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--ttft", type=int, default=50, help="b's time to first token, ms")
    parser.add_argument("--at", type=int, default=10, help="chunks a delivers before failing")
    args = parser.parse_args()
    main(args.rounds, args.ttft, args.at)
