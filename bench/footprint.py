"""Memory of an idle gateway in front of upstream APIs: RSS and PSS, one worker and two.

Run from the repository root::

    python bench/footprint.py                               # this tree
    python bench/footprint.py --baseline-rev REV            # and a commit, same sitting
    python bench/footprint.py --redis-url redis://...       # also --workers 2

Each run starts ``shunter serve`` on ``bench/overhead/shunter.yaml`` (two OpenAI-compatible
deployments, no local model), waits until it listens and a second more, and reads every
process of the gateway (``--workers 2``: the parent and its two workers): RSS, which
counts pages shared between processes in each, and PSS, which splits them among the
processes that share them, so that the sum of PSS is what the gateway takes. The trees
alternate run by run; the figures are medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scaling import children, free_port, wait_for_port
from trees import ROOT, baseline_tree

CONFIG = ROOT / "bench" / "overhead" / "shunter.yaml"


def _kb(path: Path, field: str) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def footprint(tree: Path, extra: list[str]) -> tuple[float, float]:
    """MB of RSS and of PSS, summed over the gateway's processes, once it idles."""
    port = free_port()
    command = [
        sys.executable, "-m", "gateway.cli", "serve", "--config", str(CONFIG),
        "--port", str(port), "--log-level", "warning", *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # from the tree itself: `-m` puts the working directory first on the path
    process = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        time.sleep(1.0)
        pids = [process.pid, *children(process.pid)]
        rss = sum(_kb(Path(f"/proc/{pid}/status"), "VmRSS:") for pid in pids)
        pss = sum(_kb(Path(f"/proc/{pid}/smaps_rollup"), "Pss:") for pid in pids)
        return rss / 1024, pss / 1024
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the tree measured")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alongside")
    parser.add_argument("--baseline-rev", help="a commit, checked out for the run as the baseline")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--redis-url", help="also measure --workers 2 (which needs Redis)")
    args = parser.parse_args()
    shapes = {"1 worker": []} if not args.redis_url else {
        "1 worker": [], "--workers 2": ["--workers", "2", "--redis-url", args.redis_url],
    }  # fmt: skip
    with baseline_tree(args.baseline, args.baseline_rev) as baseline:
        trees = (
            {"this": args.tree} if baseline is None else {"baseline": baseline, "this": args.tree}
        )
        print(f"{'':<14}" + "".join(f"{t + ' RSS':>15}{t + ' PSS':>15}" for t in trees))
        for shape, extra in shapes.items():
            runs: dict[str, list[tuple[float, float]]] = {t: [] for t in trees}
            for _ in range(args.repeats):
                for name, tree in trees.items():  # alternate: a busy spell hits both alike
                    runs[name].append(footprint(tree, extra))
            line = f"{shape:<14}"
            for done in runs.values():
                rss = statistics.median(r for r, _ in done)
                pss = statistics.median(p for _, p in done)
                line += f"{rss:>12.1f} MB{pss:>12.1f} MB"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
