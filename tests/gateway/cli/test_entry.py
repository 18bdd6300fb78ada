"""The entry point: a serving process never loads what only a terminal shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port
from tests.fixtures.fault_upstream import FaultUpstream

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
print(json.dumps({"code": code, "loaded": loaded, "httpx": "httpx" in sys.modules}))
"""


def _run(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", RUN, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# serve a config of upstream deployments, answer one chat request, then list what the
# process holds (the request is sent from a thread of the same process, with urllib)
SERVE = """
import json, os, socket, sys, threading, time, urllib.request
port = int(sys.argv[-1])
sys.argv = ["shunter", *sys.argv[1:-1], "--port", str(port)]

def ask():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", body.encode(),
        {"content-type": "application/json"},
    )
    status = urllib.request.urlopen(request, timeout=30).status
    modules = sorted(name for name, module in sys.modules.items() if module is not None)
    print(json.dumps({"status": status, "modules": modules}), flush=True)
    os._exit(0)

threading.Thread(target=ask, daemon=True).start()
from gateway.cli import main
main()
"""

UNUSED_BY_UPSTREAM_GATEWAY = (
    "rich",  # terminal output (httpx's and structlog's optional extras)
    "pygments",
    "colorama",
    "watchfiles",
    "httpx",  # only proxied upstreams, tests' transports and KV moves send through it
    "backends.anthropic.backend",  # backend kinds no deployment has
    "backends.gemini.backend",
    "backends.vllm.backend",
    "backends.llamacpp.backend",
    "gateway.models.store",  # model files: no deployment reads one
    "pydantic.v1",  # Litestar's pydantic and attrs plugins: no route uses them
    "attr",
    "anyio._backends._asyncio",  # Litestar's event emitter: no event has a listener
)


def test_serving_upstreams_loads_only_what_it_uses(tmp_path: Path) -> None:
    with FaultUpstream() as upstream:
        config = tmp_path / "upstreams.yaml"
        config.write_text(
            "deployments:\n"
            f"  - {{name: a, backend: openai, base_url: '{upstream.url}', model: up}}\n"
            "models:\n  m: {candidates: [a]}\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", SERVE, "serve", "--config", str(config), str(free_port())],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.stdout.strip(), done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == 200
    loaded = set(result["modules"])
    assert "backends.openai.backend" in loaded  # the stack was loaded ...
    assert sorted(loaded.intersection(UNUSED_BY_UPSTREAM_GATEWAY)) == []  # ... and only it


def test_a_terminal_command_keeps_its_tables(tmp_path: Path) -> None:
    config = tmp_path / "one.yaml"
    config.write_text(
        "deployments:\n"
        "  - {name: a, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: up}\n"
        "models:\n  m: {candidates: [a]}\n"
    )
    result = _run("route", "--config", str(config), "--model", "m")
    assert "rich" in result["loaded"]  # the table printer was not left out
