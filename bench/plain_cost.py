"""The plain request's cost, this tree against baseline commits, on the overhead harness
in one sitting: the gateway's CPU per non-streamed and per streamed request (20 chunks) at
concurrency 1 and 32, and requests a second per core of the gateway.

Each tree serves ``bench/overhead/shunter.yaml`` with ``shunter serve`` (one process, logs
at warning) from the repository's ``.venv``; the shared harness pins it to CPU 1 and the
load and the fake nginx upstream to CPU 0 (see ``bench/http_server.py`` for the harness
and what it needs). The trees alternate round by round, so that a busy spell of a shared
machine falls on all of them; the figures are medians over the rounds, with the best
round beside them (the least disturbed), and each baseline's ratio to this tree (above
1: this tree costs less).

    .venv/bin/python bench/plain_cost.py --baseline-rev 0631331 --baseline-rev HEAD~3
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from pathlib import Path

from http_server import PORT, cells, figures, harness_arguments, run_one
from trees import ROOT, checked_out

CONFIG = ROOT / "bench" / "overhead" / "shunter.yaml"
FIGURES = ("cpu ms/req", "req/s/core")


def serve_command(tree: Path) -> str:
    """``shunter serve`` of ``tree``, with the repository's environment (``-m`` from the
    tree puts its own packages first on the path)."""
    python = ROOT / ".venv" / "bin" / "python"
    serve = f"{python} -m gateway.cli serve --config {CONFIG} --port {PORT} --log-level warning"
    return f"env -C {tree} PYTHONPATH={tree} {serve}"


def report(out: Path, labels: list[str]) -> None:
    runs = {label: cells(out, label) for label in labels}
    this = labels[-1]
    head = "".join(f"{label:>22}" for label in labels)
    print(f"{'mode':<8}{'c':>4}  {'figure':<12}{head}   (median, best round; ratio to this)")
    for key in sorted(runs[this]):
        for name in FIGURES:
            line = f"{key[0]:<8}{key[1]:>4}  {name:<12}"
            mine = statistics.median(figures(r)[name] for r in runs[this][key])
            for label in labels:
                got = [figures(r)[name] for r in runs[label].get(key, [])]
                if not got:
                    line += f"{'-':>22}"
                    continue
                best = min(got) if name == "cpu ms/req" else max(got)
                median = statistics.median(got)
                ratio = median / mine if name == "cpu ms/req" else mine / median
                shown = f"{median:.3f} ({best:.3f})"
                if label != this:
                    shown += f" {ratio:.2f}x"
                line += f"{shown:>22}"
            print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--baseline-rev", action="append", default=[], help="repeatable")
    harness_arguments(parser, rounds=4, duration=5)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="plain-cost-"))
    with contextlib.ExitStack() as stack:
        trees = {rev: stack.enter_context(checked_out(rev)) for rev in args.baseline_rev}
        trees["this"] = ROOT
        for round_ in range(args.rounds):
            for label, tree in trees.items():
                run_one(f"{label}-r{round_}", serve_command(tree), out, args)
    print(f"results: {out}")
    report(out, list(trees))
    return 0


if __name__ == "__main__":
    sys.exit(main())
