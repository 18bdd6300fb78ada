"""`shunter calibrate` on labelled questions, against two loopback upstreams: the small
one sure or unsure on demand, the large one always answering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main
from policies.calibration import Outcome, auroc, cheapest_reaching, grade, sweep
from tests.gateway.dispatch.judged_upstream import JudgedUpstream


def test_calibrate_prints_the_cheapest_threshold_reaching_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the small step answers "small ...": right where "small" is accepted, and those are
    # exactly the questions it is sure of; the large step ("large ...") is always right
    questions = tmp_path / "questions.jsonl"
    lines = [{"question": f"q{i} [sure]", "answers": ["small", "large"]} for i in range(3)]
    lines += [{"question": f"q{i} [unsure]", "answer": "large"} for i in range(3)]
    questions.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    with JudgedUpstream("small") as small, JudgedUpstream("large") as large:
        config = tmp_path / "shunter.yaml"
        config.write_text(
            "deployments:\n"
            f"  - {{name: big, backend: openai, base_url: '{large.url}', model: l,\n"
            "     params_b: 70, price: {input_per_1m: 10, output_per_1m: 30}}\n"
            f"  - {{name: little, backend: openai, base_url: '{small.url}', model: s,\n"
            "     params_b: 1, price: {input_per_1m: 1, output_per_1m: 2}}\n"
            "models:\n"
            "  chat: {candidates: [big, little], policy: [smallest], "
            "cascade: {min_confidence: 0.5}}\n"
        )
        out_file = tmp_path / "answers.json"
        code = main(
            ["calibrate", "--config", str(config), "--model", "chat", "--questions",
             str(questions), "--target", "1", "--out", str(out_file)]
        )  # fmt: skip
        assert all(body["logprobs"] is True for body in small.bodies)
        assert not any("logprobs" in body for body in large.bodies)
    out = capsys.readouterr().out
    assert code == 0
    assert "small step little, large step big; 6 questions" in out
    assert "small alone: accuracy 0.500" in out and "large alone: accuracy 1.000" in out
    assert "scorer mean: AUROC 1.000" in out
    # unsure answers score exp(-2) = 0.135: 0.15 is the first threshold escalating them all
    assert "target 1: cascade: {min_confidence: 0.15, scorer: mean}" in out
    assert "escalated 50.0%" in out
    saved = json.loads(out_file.read_text())["outcomes"]
    assert [row["small_correct"] for row in saved] == [True] * 3 + [False] * 3


def test_calibrate_refuses_a_bad_questions_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = tmp_path / "questions.jsonl"
    questions.write_text('{"question": "q"}\n')
    assert main(["calibrate", "--model", "smollm2", "--questions", str(questions)]) == 2
    assert f"{questions}:1: expected" in capsys.readouterr().err


def test_sweep_auroc_and_choice_on_known_outcomes() -> None:
    sure, unsure = (-0.05, -0.05), (-0.05, -3.0)  # mean 0.95 / 0.22; least likely 0.95 / 0.05
    outcomes = [
        Outcome(sure, True, True, 10, 20, 1e-6, 1e-4),
        Outcome(unsure, False, True, 10, 20, 1e-6, 1e-4),
        Outcome(unsure, True, True, 10, 20, 1e-6, 1e-4),
    ]
    rows = {r.threshold: r for r in sweep(outcomes, "mean", [0.0, 0.5, 1.0])}
    assert rows[0.0].accuracy == pytest.approx(2 / 3) and rows[0.0].escalated == 0
    assert rows[0.5].accuracy == 1 and rows[0.5].escalated == pytest.approx(2 / 3)
    assert rows[0.5].usd == pytest.approx(1e-6 + 2 / 3 * 1e-4)
    assert rows[1.0].escalated == 1
    assert auroc(outcomes) == pytest.approx(0.75)  # right: 0.95, 0.22; wrong: 0.22 (a tie)
    chosen = cheapest_reaching(list(rows.values()), 1.0)
    assert chosen is not None and chosen.threshold == 0.5
    assert cheapest_reaching(list(rows.values()), 1.01) is None


@pytest.mark.parametrize(
    ("answer", "accepted", "right"),
    [
        ("Paris.", ["Paris"], True),
        ("The capital is paris", ["Paris"], True),
        ("142", ["42"], False),
        ("1,000 grams", ["1000"], True),
        ("12.0", ["12"], True),
        ("Brasília", ["Brasilia"], True),
        ("Buenos Aires", ["Buenos Aires"], True),
        ("Buenos", ["Buenos Aires"], False),
    ],
)
def test_grade_looks_for_whole_words(answer: str, accepted: list[str], right: bool) -> None:
    assert grade(answer, accepted) is right
