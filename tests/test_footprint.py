"""A gateway loads what its config uses: in front of upstream APIs alone, no engine, no
numerical library, no model-file writer, no template engine (until the status page or a
local model needs one), no tracing SDK (no span exporter configured) and (no MCP server
configured) no MCP library is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
