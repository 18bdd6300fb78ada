"""The entry point: a serving process never loads what only a terminal shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# run a command as its own process would (no argv given), then list what it loaded
RUN = """
import json, sys
sys.argv = ["shunter", *sys.argv[1:]]
from gateway.cli import TERMINAL_ONLY, main
try:
    code = main()
except SystemExit as exit:
    code = exit.code
loaded = sorted(name for name in TERMINAL_ONLY if sys.modules.get(name) is not None)
print(json.dumps({"code": code, "loaded": loaded, "stack": "gateway.config" in sys.modules}))
"""


def _run(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", RUN, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_serve_loads_no_terminal_package(tmp_path: Path) -> None:
    # a config that fails its check: serve stops after loading its whole command stack
    bad = tmp_path / "bad.yaml"
    bad.write_text("deployments: []\nmodels: {m: {candidates: [nowhere]}}\n")
    result = _run("serve", "--config", str(bad))
    assert result["code"] == 2
    assert result["stack"] is True  # the stack was loaded ...
    assert result["loaded"] == []  # ... without rich, pygments, colorama or watchfiles


def test_a_terminal_command_keeps_its_tables(tmp_path: Path) -> None:
    config = tmp_path / "one.yaml"
    config.write_text(
        "deployments:\n"
        "  - {name: a, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: up}\n"
        "models:\n  m: {candidates: [a]}\n"
    )
    result = _run("route", "--config", str(config), "--model", "m")
    assert "rich" in result["loaded"]  # the table printer was not left out
