"""Latency and cost predictions from a candidate's facts and live figures.

The model is deliberately simple, so that a routing decision can be explained in one line:

* queue wait: zero while a slot is free; otherwise the requests ahead (queued, plus this
  one) divided by the rate at which slots free up. That rate is taken as the smaller of
  slots ÷ mean slot-hold time (steady state) and the measured recent departures per
  second (right after a burst fills every slot, few finish soon). A KV cache at or
  above :data:`KV_SATURATED` counts as "no free slot" (the engine would queue or preempt).
  Slots busy and requests queued are the engine's figures, raised to what the gateway's
  own requests there imply (an engine's report may be a poll old). A queue at the
  engine's ``queue_limit`` waits forever: the engine would refuse the request.
* TTFT: max(queue wait, prefill backlog ÷ prefill rate) + uncached prompt tokens ÷
  prefill rate + the candidate's fixed ``base_ttft_ms``: prompts already in slots are
  processed first, and a queued request's wait usually outlasts them. Uncached: the
  prompt less the longest prefix the candidate holds in its KV cache, both in the
  candidate's own tokens (:mod:`policies.prefix`). When no prefill rate is known: queue
  wait + the measured EWMA TTFT.
* TPOT: the larger of the measured EWMA inter-token latency and the share of the engine's
  aggregate decode rate one more stream would get, ``(busy + 1) / decode_tokens_per_s``.
* cost: prompt x input price + expected output x output price. Local deployments priced
  by the hour get per-token prices from $/hour ÷ (3600 x measured tokens/s).

Every function returns ``None`` when the figures it needs are missing.
"""

from __future__ import annotations

import math

from policies.facts import Candidate, RequestFacts
from policies.prefix import uncached_tokens

KV_SATURATED = 0.95
"""KV occupancy (used ÷ total) from which a deployment is treated as having no free slot."""


def _free_slots(cand: Candidate, queued: int) -> int | None:
    live = cand.live
    if live.slots_total is None or live.slots_busy is None:
        return None
    if live.kv_used is not None and live.kv_total and live.kv_used / live.kv_total >= KV_SATURATED:
        return 0
    busy = max(live.slots_busy, live.in_flight - queued)
    return max(live.slots_total - busy, 0)


def _queued(cand: Candidate) -> int:
    """Requests waiting at the engine: its report, or more where the requests the gateway
    has there (``in_flight``) outnumber its slots."""
    live = cand.live
    if live.slots_total is None:
        return live.queue_depth
    return max(live.queue_depth, live.in_flight - live.slots_total)


def prefill_ms(request: RequestFacts, cand: Candidate) -> float | None:
    """Time to process the prompt's uncached tokens at the measured prefill rate, without
    queueing."""
    rate = cand.live.prefill_tokens_per_s
    if not rate:
        return None
    return 1000.0 * uncached_tokens(request, cand) / rate


def queue_wait_ms(request: RequestFacts, cand: Candidate) -> float | None:
    """Predicted wait for a slot; ``None`` if there is a queue but no rate to drain it;
    ``inf`` when the engine's queue is full (it would refuse the request)."""
    live = cand.live
    queued = _queued(cand)
    free = _free_slots(cand, queued)
    if free is None:
        if queued == 0:
            return 0.0
        ahead, capacity = queued, cand.facts.max_concurrency or max(live.in_flight, 1)
    else:
        if queued < free:
            return 0.0
        if live.queue_limit is not None and queued >= live.queue_limit:
            return math.inf
        ahead, capacity = queued - free + 1, max(live.slots_total or 1, 1)
    service = live.ewma_service_ms
    if service is None:
        service = _own_service_ms(request, cand)
    rates = [1000.0 * capacity / service] if service else []
    if live.departures_per_s:
        rates.append(live.departures_per_s)
    if not rates:
        return None
    return 1000.0 * ahead / max(min(rates), 1e-9)


def _own_service_ms(request: RequestFacts, cand: Candidate) -> float | None:
    """Slot-hold time of a request like this one, a stand-in when none is measured."""
    prefill = prefill_ms(request, cand)
    tpot = predict_tpot_ms(cand)
    if prefill is None or tpot is None:
        return None
    return prefill + request.output_tokens * tpot


def predict_ttft_ms(request: RequestFacts, cand: Candidate) -> float | None:
    """Predicted time to first token for this request on this candidate."""
    wait = queue_wait_ms(request, cand)
    if wait is None or math.isinf(wait):
        return wait  # no figures to drain a queue; or a full queue: never
    prefill = prefill_ms(request, cand)
    rate = cand.live.prefill_tokens_per_s
    if prefill is not None and rate:
        backlog = 1000.0 * cand.live.prefill_backlog_tokens / rate
        return max(wait, backlog) + prefill + cand.facts.base_ttft_ms
    if cand.live.ewma_ttft_ms is not None:
        return wait + cand.live.ewma_ttft_ms
    return None


def predict_tpot_ms(cand: Candidate) -> float | None:
    """Predicted time per output token if one more stream joins the current batch."""
    live = cand.live
    share: float | None = None
    if live.decode_tokens_per_s:
        busy = live.slots_busy if live.slots_busy is not None else live.in_flight
        share = 1000.0 * (busy + 1) / live.decode_tokens_per_s
    known = [v for v in (live.ewma_itl_ms, share) if v is not None]
    return max(known) if known else None


def predict_total_ms(request: RequestFacts, cand: Candidate) -> float | None:
    """Predicted end-to-end latency: TTFT plus the expected output at the predicted TPOT."""
    ttft = predict_ttft_ms(request, cand)
    tpot = predict_tpot_ms(cand)
    if ttft is None or tpot is None:
        return None
    return ttft + max(request.output_tokens - 1, 0) * tpot


def token_prices(cand: Candidate) -> tuple[float | None, float | None]:
    """Dollars per input token and per output token; either may be unknown."""
    pricing, live = cand.facts.pricing, cand.live
    per_hour = pricing.usd_per_hour
    price_in = _per_token(pricing.input_per_1m, per_hour, live.prefill_tokens_per_s)
    price_out = _per_token(pricing.output_per_1m, per_hour, live.decode_tokens_per_s)
    return price_in, price_out


def _per_token(per_1m: float | None, per_hour: float | None, rate: float | None) -> float | None:
    if per_1m is not None:
        return per_1m / 1e6
    if per_hour is not None and rate:
        return per_hour / 3600.0 / rate
    return None


def estimate_cost_usd(request: RequestFacts, cand: Candidate) -> float | None:
    """Estimated dollars for this request on this candidate, ``None`` if unpriced."""
    price_in, price_out = token_prices(cand)
    if price_in is None or price_out is None:
        return None
    return request.prompt_tokens * price_in + request.output_tokens * price_out
