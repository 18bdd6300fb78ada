"""A gateway loads what its config uses: in front of upstream APIs alone, no engine, no
numerical library, no model-file writer, no template engine (until the status page or a
local model needs one), no tracing SDK (no span exporter configured) and (no MCP server
configured) no MCP library is imported; serving requests, it loads no backend kind it has
no deployment of, no httpx (no proxy) and none of the framework's unused plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port
from tests.fixtures.fault_upstream import FaultUpstream

ROOT = Path(__file__).resolve().parents[1]

UPSTREAMS_ONLY = """
deployments:
  - {name: a, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: up}
  - {name: b, backend: anthropic, base_url: 'http://127.0.0.1:9', model: up, api_key_env: KEY_FOR_B}
  - {name: c, backend: gemini, base_url: 'http://127.0.0.1:9', model: up, api_key_env: KEY_FOR_B}
models:
  m: {candidates: [a, b, c]}
"""

# what `shunter serve` does up to listening: parse the config, build the gateway and the app
SERVE_PATH = """
import json, sys
from pathlib import Path
from gateway.cli.commands import _parser
from gateway.cli.startup import preflight
from gateway.dispatch import Gateway
from gateway.http.app import AppSettings, create_app
from gateway.http.server import serve
from gateway.state import StateSettings
loaded = preflight(Path(sys.argv[1]))
gateway = Gateway.from_config(loaded.config)
create_app(AppSettings(config=loaded.config, state=StateSettings()), gateway)
_parser()
heavy = ("llama_cpp", "numpy", "gguf", "vllm", "torch", "mcp", "mcp_types", "jinja2")
heavy += ("opentelemetry.sdk",)
print(json.dumps(sorted(name for name in heavy if name in sys.modules)))
"""


def test_a_gateway_of_upstreams_imports_no_engine(tmp_path: Path) -> None:
    config = tmp_path / "shunter.yaml"
    config.write_text(UPSTREAMS_ONLY)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KEY_FOR_B": "sk-test"}
    result = subprocess.run(
        [sys.executable, "-c", SERVE_PATH, str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(result.stdout.splitlines()[-1]) == []


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
