"""The replay's requests fed to ``bench/route_sim.py``'s model: predicted against measured.

Each replayed policy's own trace (when each request was sent, its prompt and answer
lengths, whether it fell in a burst, and the fallback API's latency for it, the same draw
the API made) runs through :func:`bench.route_sim.simulate` with the same policy steps and
engines whose figures were measured on one worker at start-up (:func:`calibrate`). The
simulator has no prefix cache (every prompt is prefilled whole) and no sessions (arrivals
are taken as they were sent, not re-timed by its own latencies); the gap between its
prediction and the measurement is what those leave out.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from bench.agent_api import ApiProfile
from bench.agent_client import Sent, send_turn
from bench.agent_report import PolicyRun
from bench.agent_workload import Session, Turn
from bench.route_sim import MAX_TOKENS, ApiSpec, Arrival, EngineSpec, Workload, simulate
from gateway.loadgen.workload import synth_text

CHUNK = 512  # llama.cpp's prompt batch (n_batch)


@dataclass(frozen=True)
class EngineFigures:
    """One engine as measured: prefill rate and decode step times."""

    prefill_tps: float
    step_1_ms: float
    step_full_ms: float
    slots: int

    def spec(self, name: str, usd_per_hour: float, ctx: int) -> EngineSpec:
        """The simulator's engine: a linear step time through the two measured points."""
        per_seq = max(0.0, (self.step_full_ms - self.step_1_ms) / max(self.slots - 1, 1))
        base = max(0.1, self.step_1_ms - per_seq)
        # the simulator asks MAX_TOKENS of every request where the replay asks its recorded
        # answer's length: the context is widened by that much so `capable` agrees
        context = ctx + MAX_TOKENS
        return EngineSpec(
            name, "llamacpp", self.slots, self.prefill_tps, base, per_seq, CHUNK, usd_per_hour,
            context,
        )  # fmt: skip


def _turn(seed: int, words: int, answer: int) -> Turn:
    text = synth_text(random.Random(f"calibrate-{seed}"), words)
    return Turn(-1, 0, ({"role": "user", "content": f"{seed} {text}"},), answer, 0.0)


async def _timed(base: str, model: str, turns: Sequence[Turn]) -> list[Sent]:
    out = [Sent(-1, 0, 0.0, False, t.prompt_tokens, t.max_tokens) for t in turns]
    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(
            *(send_turn(client, base, model, t, s) for t, s in zip(turns, out, strict=True))
        )
    if not all(s.ok for s in out):
        raise RuntimeError(f"calibration failed: {[s.error for s in out if not s.ok]}")
    return out


def _step_ms(sent: Sequence[Sent]) -> float:
    return statistics.median(
        1000 * (s.e2e_s - (s.ttft_s or 0.0)) / max(s.output_tokens - 1, 1) for s in sent
    )


def calibrate(base: str, model: str, slots: int, prompt_words: int) -> EngineFigures:
    """Prefill rate (two fresh prompts, one token out) and decode step time with one and
    with ``slots`` sequences, measured on one engine."""
    prefill = asyncio.run(_timed(base, model, [_turn(1, prompt_words, 1)]))
    prefill += asyncio.run(_timed(base, model, [_turn(2, prompt_words, 1)]))
    # in the bench's own token count, the unit of the simulator's trace
    rate = statistics.median(s.prompt_estimate / (s.ttft_s or 1.0) for s in prefill)
    one = asyncio.run(_timed(base, model, [_turn(3, 8, 33)]))
    full = asyncio.run(_timed(base, model, [_turn(10 + i, 8, 33) for i in range(slots)]))
    return EngineFigures(rate, _step_ms(one), _step_ms(full), slots)


def _trace(run: PolicyRun, turns: dict[tuple[int, int], Turn], api: ApiProfile) -> list[Arrival]:
    tpot = 1000.0 / api.tokens_per_s
    return [
        Arrival(
            s.sent_s,
            s.prompt_estimate,
            s.max_tokens,
            s.in_burst,
            1000 * api.ttft_s(list(turns[(s.session, s.turn)].messages)),
            tpot,
        )
        for s in run.sent
    ]


def _api_spec(api: ApiProfile) -> ApiSpec:
    return ApiSpec(
        "api", api.input_per_1m, api.output_per_1m, api.ttft_ms, api.ttft_sigma,
        api.ms_per_prompt_token, 0.0, 1.0, 1000.0 / api.tokens_per_s, 0.0,
        1,  # the gateway declares no concurrency for an API: least_loaded counts it raw
    )  # fmt: skip


def predict(
    runs: Sequence[PolicyRun], sessions: Sequence[Session], api: ApiProfile,
    engines: Sequence[EngineSpec], slo_ms: float,
) -> list[dict[str, Any]]:  # fmt: skip
    """For each run, the simulator's SLO attainment, spill share and cost on its trace,
    with its all-API cost on the same trace."""
    turns = {(t.session, t.index): t for s in sessions for t in s.turns}
    spec, out = _api_spec(api), []
    for run in runs:
        if isinstance(run.policy, dict):
            continue  # no policy line: its steps come from the candidates' config
        trace = _trace(run, turns, api)
        work = Workload(horizon_s=run.wall_s)
        ours = simulate(run.name, trace, work, spec, engines, steps=run.policy)
        alone = simulate("all-to-api", trace, work, spec, engines)

        def met(in_burst: bool, jobs: Any = ours.jobs) -> float | None:
            rows = [j for j in jobs if j.arrival.in_burst or not in_burst]
            return sum(j.ttft_ms <= slo_ms for j in rows) / len(rows) if rows else None

        out.append({
            "policy": run.name, "round": run.round, "slo_met": met(False),
            "slo_met_in_bursts": met(True),
            "spilled": sum(j.deployment == "api" for j in ours.jobs) / max(len(ours.jobs), 1),
            "usd": ours.usd, "all_api_usd": alone.usd,
        })  # fmt: skip
    return out


def comparison(measured: Sequence[dict[str, Any]], predicted: Sequence[dict[str, Any]],
               all_api: float) -> str:  # fmt: skip
    """Predicted against measured, one row per policy (medians over rounds)."""

    def pc(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.0f}%"

    head = "policy | SLO met: measured / predicted | in bursts | spilled | cost vs all-API"
    lines = [f"| {head} |", "|---" * 5 + "|"]
    for m in measured:
        ps = [p for p in predicted if p["policy"] == m["policy"]]
        if not ps:
            continue
        keys = ("slo_met", "slo_met_in_bursts", "spilled", "usd", "all_api_usd")
        p = {k: statistics.median(x[k] for x in ps if x[k] is not None) for k in keys}
        lines.append(
            f"| {m['policy']} | {pc(m['slo_met'])} / {pc(p['slo_met'])} "
            f"| {pc(m['slo_met_in_bursts'])} / {pc(p['slo_met_in_bursts'])} "
            f"| {pc(m['spilled'])} / {pc(p['spilled'])} "
            f"| {pc(m['usd'] / all_api)} / {pc(p['usd'] / p['all_api_usd'])} |"
        )
    return "\n".join(lines)
