"""``shunter calibrate``: pick a cascade's ``min_confidence`` on your own labelled questions.

The model's candidates are ordered as its policy ranks them before anything is measured
(the order a cascade walks). Every question goes to the first (the small step, asked for
token logprobs) and to the second (the large step), in this process, through the same
backends the gateway serves with; each answer is graded against the accepted answers. Then
the sweep of :mod:`policies.calibration`: for each scorer, how well its confidence separates
the small step's right answers from its wrong ones (AUROC), and for each threshold the
cascade's accuracy, share escalated and cost. Printed last: the threshold that reaches
``--target`` accuracy at the least cost, as the ``cascade:`` line to paste.

Questions file: JSON lines, ``{"question": "...", "answers": ["...", ...]}`` (``answer``: a
single accepted answer). An answer is right when it says an accepted one as whole words.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.config import load_or_report

if TYPE_CHECKING:
    from backends.base import Backend
    from backends.registry import DeploymentConfig
    from policies import Scorer
    from policies.calibration import Labelled, Outcome

SYSTEM = "Answer with the answer only: a number, a word or a name. No explanation."


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``calibrate`` to the ``shunter`` command."""
    cmd = sub.add_parser(
        "calibrate",
        help="choose a cascade's min_confidence on labelled questions",
        description="Ask a model's first two ranked deployments every question of a "
        "labelled set, grade the answers, and print, per scorer and threshold, the "
        "cascade's accuracy, share escalated and cost, and the threshold that reaches the "
        "target accuracy at the least cost.",
    )
    cmd.add_argument("--config", type=Path, help="routing YAML (default: the embedded default)")
    cmd.add_argument("--model", required=True, help="the public model name (its cascade)")
    cmd.add_argument(
        "--questions", type=Path, required=True, help='JSON lines: {"question", "answers"}'
    )
    cmd.add_argument("--target", type=float, default=0.9, help="accuracy to reach (0-1)")
    cmd.add_argument("--max-tokens", type=int, default=16, help="per answer")
    cmd.add_argument("--system", default=SYSTEM, help="system prompt sent with each question")
    cmd.add_argument("--concurrency", type=int, default=4, help="questions in flight")
    cmd.add_argument(
        "--scorers",
        default="mean,quantile:0,quantile:0.1,quantile:0.25",
        help="comma-separated: mean, quantile:Q",
    )
    cmd.add_argument("--out", type=Path, help="write every answer and the sweep as JSON")
    cmd.set_defaults(handler=_calibrate)


def read_questions(path: Path) -> list[Labelled]:
    """The labelled questions of a JSON-lines file (``ValueError`` naming the line)."""
    from policies.calibration import Labelled

    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            answers = item.get("answers") or [item["answer"]]
            found.append(Labelled(str(item["question"]), tuple(str(a) for a in answers)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(
                f'{path}:{number}: expected {{"question": ..., "answers": [...]}} ({exc})'
            ) from None
    if not found:
        raise ValueError(f"{path}: no questions")
    return found


def parse_scorers(text: str) -> list[Scorer]:
    """``mean,quantile:0.1`` as scorers (``ValueError`` for anything else)."""
    from policies import QuantileScorer

    scorers: list[Scorer] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part == "mean":
            scorers.append("mean")
        elif part.startswith("quantile:"):
            scorers.append(QuantileScorer(quantile=float(part.removeprefix("quantile:"))))
        else:
            raise ValueError(f"unknown scorer {part!r}: use mean or quantile:Q")
    return scorers


def _calibrate(args: argparse.Namespace) -> int:
    from gateway.config.sizing import static_order
    from policies.calibration import report

    config = load_or_report(args.config)
    if config is None:
        return 2
    if args.model not in config.models:
        print(
            f"error: no model {args.model!r} (models: {', '.join(config.models)})", file=sys.stderr
        )
        return 2
    try:
        items = read_questions(args.questions)
        scorers = parse_scorers(args.scorers)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    route = config.models[args.model]
    order = static_order(route.policy, [config.deployment(n) for n in route.candidates])
    if len(order) < 2:
        print(f"error: model {args.model!r} needs two candidates to calibrate", file=sys.stderr)
        return 2
    small, large = order[0], order[1]
    if not small.returns_logprobs():
        print(f"error: {small.name!r} ranks first and cannot return logprobs", file=sys.stderr)
        return 2
    print(f"model {args.model}: small step {small.name}, large step {large.name}; "
          f"{len(items)} questions")  # fmt: skip
    outcomes = asyncio.run(_collect(small, large, items, args))
    text, best = report(outcomes, scorers, args.target)
    print(text)
    if args.out is not None:
        rows = [asdict(o) for o in outcomes]
        args.out.write_text(json.dumps({"outcomes": rows}, indent=1), encoding="utf-8")
    return 0 if best else 1


async def _collect(
    small: DeploymentConfig,
    large: DeploymentConfig,
    items: Sequence[Labelled],
    args: argparse.Namespace,
) -> list[Outcome]:
    from backends.registry import create_backend
    from policies.calibration import Outcome, grade

    backends = {d.name: create_backend(d) for d in (small, large)}
    await asyncio.gather(*(b.start() for b in backends.values()))
    gate = asyncio.Semaphore(max(1, args.concurrency))

    async def one(item: Labelled) -> Outcome:
        async with gate:
            s_text, s_logprobs, s_tokens, s_usd = await _ask(
                backends[small.name], small, item.question, args, logprobs=True
            )
            l_text, _, l_tokens, l_usd = await _ask(
                backends[large.name], large, item.question, args, logprobs=False
            )
        return Outcome(
            logprobs=tuple(s_logprobs),
            small_correct=grade(s_text, item.answers),
            large_correct=grade(l_text, item.answers),
            small_tokens=s_tokens,
            large_tokens=l_tokens,
            small_usd=s_usd,
            large_usd=l_usd,
        )

    try:
        return list(await asyncio.gather(*(one(item) for item in items)))
    finally:
        await asyncio.gather(*(b.aclose() for b in backends.values()))


async def _ask(
    backend: Backend,
    settings: DeploymentConfig,
    question: str,
    args: argparse.Namespace,
    *,
    logprobs: bool,
) -> tuple[str, list[float], int, float]:
    """One answer: its text, token logprobs, tokens (prompt + completion) and dollars."""
    from backends.base import cost_usd
    from gateway.protocol import ChatCompletionRequest

    request = ChatCompletionRequest.model_validate(
        {
            "model": "calibrate",
            "messages": [
                {"role": "system", "content": args.system},
                {"role": "user", "content": question},
            ],
            "temperature": 0,
            "max_tokens": args.max_tokens,
            "logprobs": logprobs or None,
        }
    )
    answer = await backend.chat(request)
    choice = answer.choices[0]
    content = choice.logprobs.content if choice.logprobs is not None else None
    values = [float(i["logprob"]) for i in content or [] if isinstance(i, dict)]
    usage = answer.usage
    tokens = usage.total_tokens if usage is not None else 0
    usd = cost_usd(
        settings.price,
        usage.prompt_tokens if usage else 0,
        usage.completion_tokens if usage else 0,
    )
    return choice.message.content or "", values, tokens, usd
