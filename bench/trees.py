"""Source trees for the benches that compare two: a checkout given by path, or a commit
checked out for the run in a temporary worktree (``--baseline-rev REV``), removed after."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def checked_out(rev: str, repo: Path = ROOT) -> Iterator[Path]:
    """``rev`` of ``repo`` in a temporary worktree, for as long as the block runs."""
    folder = Path(tempfile.mkdtemp(prefix="bench-baseline-")) / "tree"
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "worktree", "add", "--detach", str(folder), rev], check=True)
    try:
        yield folder
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(folder)], check=False)
        shutil.rmtree(folder.parent, ignore_errors=True)


@contextlib.contextmanager
def baseline_tree(path: Path | None, rev: str | None) -> Iterator[Path | None]:
    """The baseline a bench was asked for: ``path`` as it is, ``rev`` checked out for the
    run, or none."""
    if rev is None:
        yield path
        return
    with checked_out(rev) as tree:
        yield tree
