"""Trace-driven routing simulation running the real ``policies`` code.

Run from the repository root: ``python -m bench.route_sim [--seed N] [--sweep]``.
The scenario, its assumptions and the results are in bench/ROUTE_SIM.md.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from policies import Candidate, CandidateFacts, Capabilities, LiveFigures, Policy, Pricing
from policies import RequestFacts as Facts

TTFT_SLO_MS, TPOT_SLO_MS = 500.0, 50.0
EWMA_ALPHA = 0.2
DEPARTURE_WINDOW_S = 5.0  # the gateway's window for "requests finished per second"
MAX_TOKENS = 1024  # what clients ask for; real output lengths are drawn separately


@dataclass(frozen=True)
class Workload:
    """Markov-modulated Poisson arrivals and log-normal lengths."""

    horizon_s: float = 1200.0
    calm_rps: float = 6.0
    burst_rps: float = 30.0
    calm_mean_s: float = 135.0
    burst_mean_s: float = 15.0
    prompt_median: float = 600.0
    prompt_sigma: float = 0.8
    output_median: float = 180.0
    output_sigma: float = 0.7


@dataclass(frozen=True)
class EngineSpec:
    """A local engine: slots, rates and price."""

    name: str
    backend: str
    slots: int
    prefill_tps: float
    step_base_ms: float
    step_per_seq_ms: float
    chunk: int
    usd_per_hour: float
    context: int
    base_ttft_ms: float = 5.0

    def step_ms(self, decoding: int) -> float:
        """Duration of a decode step with ``decoding`` sequences and no prompt tokens."""
        return self.step_base_ms + self.step_per_seq_ms * decoding


@dataclass(frozen=True)
class ApiSpec:
    """A managed API: list prices and a latency profile (log-normal TTFT and TPOT)."""

    name: str = "api"
    input_per_1m: float = 0.15
    output_per_1m: float = 0.60
    ttft_median_ms: float = 250.0
    ttft_sigma: float = 0.25
    ms_per_prompt_token: float = 0.05
    slow_share: float = 0.01  # calls that take slow_factor x longer to start
    slow_factor: float = 4.0
    tpot_median_ms: float = 12.0
    tpot_sigma: float = 0.25
    max_concurrency: int = 64


LLAMACPP = EngineSpec("llamacpp", "llamacpp", 4, 1200.0, 20.0, 4.0, 512, 0.15, 8192)
VLLM = EngineSpec("vllm", "vllm", 64, 20000.0, 8.0, 0.15, 2048, 2.50, 32768)
API = ApiSpec()


@dataclass(frozen=True)
class Arrival:
    """One request of the trace, with the API latency it would see (common random numbers)."""

    t: float
    prompt: int
    output: int
    in_burst: bool
    api_ttft_ms: float
    api_tpot_ms: float


def _lognormal(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return min(max(int(rng.lognormvariate(math.log(median), sigma)), lo), hi)


def make_trace(seed: int, w: Workload, api: ApiSpec) -> list[Arrival]:
    """Draw the arrivals; the same seed gives the same trace."""
    rng = random.Random(seed)
    out: list[Arrival] = []
    t, burst, phase_end = 0.0, False, rng.expovariate(1 / w.calm_mean_s)
    while True:
        t += rng.expovariate(w.burst_rps if burst else w.calm_rps)
        while t >= phase_end:
            burst = not burst
            phase_end += rng.expovariate(1 / (w.burst_mean_s if burst else w.calm_mean_s))
        if t >= w.horizon_s:
            return out
        prompt = _lognormal(rng, w.prompt_median, w.prompt_sigma, 16, 8000)
        output = _lognormal(rng, w.output_median, w.output_sigma, 8, 1024)
        ttft = rng.lognormvariate(math.log(api.ttft_median_ms), api.ttft_sigma)
        ttft *= api.slow_factor if rng.random() < api.slow_share else 1.0
        tpot = rng.lognormvariate(math.log(api.tpot_median_ms), api.tpot_sigma)
        out.append(Arrival(t, prompt, output, burst, ttft + api.ms_per_prompt_token * prompt, tpot))


def ewma(old: float | None, x: float, alpha: float = EWMA_ALPHA) -> float:
    """An exponentially weighted moving average: ``x`` folded into ``old``."""
    return x if old is None else old + alpha * (x - old)


@dataclass(eq=False)
class Job:
    """A request in flight on one deployment."""

    arrival: Arrival
    deployment: str
    prompt_left: int
    out_done: int = 0
    t_admit: float = math.nan
    t_first: float = math.nan
    t_done: float = math.nan

    def meets_slo(self) -> bool:
        """TTFT and mean TPOT over the stream both within target."""
        n = self.arrival.output
        tpot = 1000.0 * (self.t_done - self.t_first) / (n - 1) if n > 1 else 0.0
        return self.ttft_ms <= TTFT_SLO_MS and tpot <= TPOT_SLO_MS

    @property
    def ttft_ms(self) -> float:
        """Time to first token, including gateway-side queueing."""
        return 1000.0 * (self.t_first - self.arrival.t)


Push = Callable[[float, Callable[[float], None]], None]
Done = Callable[[Job], None]


class Engine:
    """A continuous-batching engine, stepped one batch at a time."""

    def __init__(self, spec: EngineSpec, push: Push, done: Done) -> None:
        self.spec, self.push, self.done = spec, push, done
        self.waiting: deque[Job] = deque()
        self.running: list[Job] = []
        self.stepping, self.backlog = False, 0
        self.departures: deque[float] = deque()
        self.ttft: float | None = None
        self.service: float | None = None
        # Seeded from a start-up benchmark, as declared figures would be.
        self.itl, self.prefill = spec.step_ms(1), spec.prefill_tps
        self.decode_cap = spec.slots / spec.step_ms(spec.slots) * 1000.0

    def submit(self, job: Job, now: float) -> None:
        """Queue a request; start stepping if idle."""
        self.waiting.append(job)
        self.backlog += job.prompt_left
        if not self.stepping:
            self._start_step(now)

    def _start_step(self, now: float) -> None:
        while self.waiting and len(self.running) < self.spec.slots:
            self.running.append(self.waiting.popleft())
            self.running[-1].t_admit = now
        self.stepping = bool(self.running)
        if not self.running:
            return
        decoding = [j for j in self.running if j.prompt_left == 0]
        budget, prefill = self.spec.chunk, []
        for job in self.running:
            if job.prompt_left and budget:
                prefill.append((job, min(job.prompt_left, budget)))
                budget -= prefill[-1][1]
        prompt_ms = 1000.0 * (self.spec.chunk - budget) / self.spec.prefill_tps
        dt_ms = self.spec.step_ms(len(decoding)) + prompt_ms
        self.push(now + dt_ms / 1000.0, lambda t: self._end_step(t, decoding, prefill, dt_ms))

    def _end_step(
        self, now: float, decoding: list[Job], prefill: list[tuple[Job, int]], dt_ms: float
    ) -> None:
        for job in decoding:
            job.out_done += 1
            self._maybe_finish(job, now)
        for job, took in prefill:
            job.prompt_left -= took
            self.backlog -= took
            if job.prompt_left == 0:
                job.t_first, job.out_done = now, 1
                self.ttft = ewma(self.ttft, job.ttft_ms)
                self._maybe_finish(job, now)
        if prefill:  # prompt tokens per second of step time, as engines report it
            self.prefill = ewma(self.prefill, 1000.0 * sum(n for _, n in prefill) / dt_ms)
        if decoding:
            self.itl = ewma(self.itl, dt_ms, alpha=0.05)
            if len(decoding) >= 0.75 * self.spec.slots:
                self.decode_cap = ewma(self.decode_cap, 1000.0 * len(decoding) / dt_ms)
        self._start_step(now)

    def _maybe_finish(self, job: Job, now: float) -> None:
        if job.out_done >= job.arrival.output:
            job.t_done = now
            self.running.remove(job)
            self.service = ewma(self.service, 1000.0 * (now - job.t_admit))
            self.departures.append(now)
            self.done(job)

    def candidate(self, now: float) -> Candidate:
        """What the gateway knows about this deployment right now."""
        s = self.spec
        while self.departures and self.departures[0] < now - DEPARTURE_WINDOW_S:
            self.departures.popleft()
        facts = CandidateFacts(
            s.name, s.backend, Capabilities(context_length=s.context),
            Pricing(usd_per_hour=s.usd_per_hour), fit="fits", base_ttft_ms=s.base_ttft_ms,
        )  # fmt: skip
        live = LiveFigures(
            ewma_ttft_ms=self.ttft, ewma_itl_ms=self.itl, ewma_service_ms=self.service,
            departures_per_s=len(self.departures) / DEPARTURE_WINDOW_S,
            in_flight=len(self.running) + len(self.waiting), queue_depth=len(self.waiting),
            slots_busy=len(self.running), slots_total=s.slots,
            prefill_tokens_per_s=self.prefill, decode_tokens_per_s=self.decode_cap,
            prefill_backlog_tokens=self.backlog,
        )  # fmt: skip
        return Candidate(facts, live)


class ManagedApi:
    """A per-token-priced API: each request's latency comes from the trace."""

    def __init__(self, spec: ApiSpec, push: Push, done: Done) -> None:
        self.spec, self.push, self.done = spec, push, done
        self.in_flight = 0
        self.ttft: float | None = None
        self.itl: float | None = None

    def submit(self, job: Job, now: float) -> None:
        """Schedule the first token and the completion."""
        a = job.arrival
        self.in_flight += 1
        first = now + a.api_ttft_ms / 1000.0
        self.push(first, lambda t: self._first(job, t))
        self.push(first + (a.output - 1) * a.api_tpot_ms / 1000.0, lambda t: self._finish(job, t))

    def _first(self, job: Job, now: float) -> None:
        job.t_first = now
        self.ttft = ewma(self.ttft, job.ttft_ms)

    def _finish(self, job: Job, now: float) -> None:
        job.t_done, job.out_done = now, job.arrival.output
        self.in_flight -= 1
        self.itl = ewma(self.itl, job.arrival.api_tpot_ms)
        self.done(job)

    def candidate(self, now: float) -> Candidate:
        """What the gateway knows about the API right now."""
        s = self.spec
        facts = CandidateFacts(
            s.name, "openai", Capabilities(context_length=128_000),
            Pricing(s.input_per_1m, s.output_per_1m), max_concurrency=s.max_concurrency,
        )  # fmt: skip
        live = LiveFigures(ewma_ttft_ms=self.ttft, ewma_itl_ms=self.itl, in_flight=self.in_flight)
        return Candidate(facts, live)


@dataclass
class Result:
    """Outcome of one policy over the trace."""

    name: str
    jobs: list[Job] = field(default_factory=list)
    usd: float = 0.0

    def attainment(self, burst_only: bool = False) -> float:
        """Share of requests meeting both SLOs."""
        jobs = [j for j in self.jobs if j.arrival.in_burst or not burst_only]
        return sum(j.meets_slo() for j in jobs) / max(len(jobs), 1)

    def ttft_pct(self, q: float) -> float:
        """A TTFT percentile in ms."""
        values = sorted(j.ttft_ms for j in self.jobs)
        return values[min(int(q * len(values)), len(values) - 1)]


SLO_STEP = {"slo": {"ttft_ms": TTFT_SLO_MS, "tpot_ms": TPOT_SLO_MS}}
POLICIES: dict[str, list[object]] = {
    "round-robin": ["healthy", "capable", "first"],  # candidate list rotated per request
    "least-loaded": ["healthy", "capable", "least_loaded"],
    "cheapest-only": ["healthy", "capable", "cheapest"],
    "slo+cost": ["healthy", "capable", SLO_STEP, "cheapest"],
    "all-to-api": ["first"],  # with the API as the only deployment
}


def simulate(
    name: str,
    trace: Sequence[Arrival],
    w: Workload,
    api: ApiSpec,
    local: Sequence[EngineSpec],
    steps: Sequence[object] | None = None,
) -> Result:
    """Replay the trace under one policy (``steps``, else :data:`POLICIES` by ``name``);
    return every finished job and the bill."""
    policy = Policy.parse(POLICIES[name] if steps is None else steps)
    result = Result(name)
    events: list[tuple[float, int, Callable[[float], None]]] = []
    order = itertools.count()  # ties in time run in the order they were scheduled

    def push(t: float, fn: Callable[[float], None]) -> None:
        heapq.heappush(events, (t, next(order), fn))

    engines = [] if name == "all-to-api" else [Engine(s, push, result.jobs.append) for s in local]
    targets: dict[str, Engine | ManagedApi] = {e.spec.name: e for e in engines}
    targets[api.name] = ManagedApi(api, push, result.jobs.append)

    def route(i: int, a: Arrival, now: float) -> None:
        cands = [t.candidate(now) for t in targets.values()]
        if name == "round-robin":
            cands = cands[i % len(cands) :] + cands[: i % len(cands)]
        chosen = policy.route(Facts(a.prompt, MAX_TOKENS, request_id=str(i)), cands, now=now)
        targets[chosen.names[0]].submit(Job(a, chosen.names[0], a.prompt), now)

    for i, arrival in enumerate(trace):
        push(arrival.t, partial(route, i, arrival))
    while events:
        t, _, fn = heapq.heappop(events)
        fn(t)
    on_api = [j.arrival for j in result.jobs if j.deployment == api.name]
    api_usd = sum(a.prompt * api.input_per_1m + a.output * api.output_per_1m for a in on_api)
    result.usd = api_usd / 1e6 + sum(e.spec.usd_per_hour for e in engines) * w.horizon_s / 3600
    return result


def _ms(value: float) -> str:  # long waits read better in seconds
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.0f} s"


def table(results: Sequence[Result]) -> str:
    """A Markdown table of the results."""
    base = next(r for r in results if r.name == "all-to-api")
    head = "policy|SLO met|in bursts|TTFT p50|TTFT p95|$/1M tokens|vs all-to-api|llamacpp/vllm/api"
    rows = [f"| {head.replace('|', ' | ')} |", "|---" * 8 + "|"]
    for r in results:
        share, n = Counter(j.deployment for j in r.jobs), len(r.jobs)
        split = "/".join(f"{100 * share[d] / n:.0f}%" for d in ("llamacpp", "vllm", "api"))
        per_1m = r.usd / sum(j.arrival.prompt + j.arrival.output for j in r.jobs) * 1e6
        rows.append(
            f"| {r.name} | {100 * r.attainment():.1f}% | {100 * r.attainment(True):.1f}% "
            f"| {_ms(r.ttft_pct(0.5))} | {_ms(r.ttft_pct(0.95))} | ${per_1m:.3f} "
            f"| {100 * r.usd / base.usd:.0f}% | {split} |"
        )
    return "\n".join(rows)


def verdict(results: Sequence[Result]) -> list[str]:
    """The issue's targets, checked for the slo+cost policy."""
    by = {r.name: r for r in results}
    ours, rr, base = by["slo+cost"], by["round-robin"], by["all-to-api"]
    ratio, cost = ours.attainment(True) / max(rr.attainment(True), 1e-9), ours.usd / base.usd
    checks = [
        ("SLO attainment >= 95%", ours.attainment() >= 0.95, f"{100 * ours.attainment():.1f}%"),
        ("cost <= 60% of all-to-api", cost <= 0.6, f"{100 * cost:.0f}%"),
        ("attainment in bursts >= 2x round-robin", ratio >= 2, f"{ratio:.2f}x"),
    ]
    return [f"- {'PASS' if ok else 'FAIL'} {label}: {value}" for label, ok, value in checks]


SWEEP: dict[str, tuple[Workload, ApiSpec]] = {
    "bursts 45 req/s": (Workload(burst_rps=45.0), API),
    "calm 8 req/s": (Workload(calm_rps=8.0), API),
    "API at half price": (Workload(), replace(API, input_per_1m=0.075, output_per_1m=0.30)),
    "API TTFT median 400 ms": (Workload(), replace(API, ttft_median_ms=400.0)),
}


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: print the table and the target checks."""
    parser = argparse.ArgumentParser(description="Routing-policy simulation (bench/ROUTE_SIM.md)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sweep", action="store_true", help="also run sensitivity variants")
    args = parser.parse_args(argv)
    scenarios = {"base": (Workload(), API)} | (SWEEP if args.sweep else {})
    for label, (w, api) in scenarios.items():
        trace = make_trace(args.seed, w, api)
        results = [simulate(name, trace, w, api, (LLAMACPP, VLLM)) for name in POLICIES]
        print(f"### {label}: seed {args.seed}, {len(trace)} requests over {w.horizon_s:.0f} s")
        print(f"\n{table(results)}\n\n" + "\n".join(verdict(results)) + "\n")


if __name__ == "__main__":
    main()
