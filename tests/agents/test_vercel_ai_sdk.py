"""The Vercel AI SDK's Anthropic provider (npm ``ai`` and ``@ai-sdk/anthropic``) completes a
tool loop through the gateway's Messages endpoint behind an ``openai`` deployment.

``vercel_anthropic.mjs`` calls ``generateText`` and then ``streamText`` with one tool and
``stopWhen: stepCountIs(3)``; the scripted upstream (:mod:`tests.fixtures.agent_upstream`)
calls the tool, whose output differs from the prompt, then answers quoting it. The provider
marks its tools ``eager_input_streaming: true`` (every tool when streaming, a tool that asks
for it otherwise): the gateway drops that field for a chat upstream and names it in the
answer's ``x-shunter-dropped``, which the script records.

Opt-in: ``SHUNTER_AGENTS=1`` and the packages installed (``scripts/test-agents.sh`` does both).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.agents.clis import agents_modules, package_version
from tests.conftest import start_server, stop_server
from tests.fixtures.agent_turns import ANSWER_PREFIX, Script
from tests.fixtures.agent_upstream import AgentUpstream

pytestmark = [
    pytest.mark.agents,
    pytest.mark.skipif(os.environ.get("SHUNTER_AGENTS") != "1", reason="set SHUNTER_AGENTS=1"),
]

SCRIPT = Path(__file__).with_name("vercel_anthropic.mjs")
MODEL = "vercel-agent"


def _run_script(api: str, number: int) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not package_version("ai") or not package_version("@ai-sdk/anthropic"):
        pytest.fail("node and the AI SDK are needed: run scripts/test-agents.sh")
    command = [node, str(SCRIPT), str(agents_modules()), api, "sk-agent-test", MODEL, str(number)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    said: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return said


def test_generate_and_stream_text_run_a_tool_through_the_gateway(tmp_path: Path) -> None:
    number = random.randrange(10**6, 10**7)
    script = Script("true", tool="lookup_marker", arguments={"number": number})
    with AgentUpstream(script) as upstream:
        config = tmp_path / "shunter.yaml"
        deployment = (
            f"{{name: scripted, backend: openai, base_url: '{upstream.url}/v1', "
            "model: scripted-model, api_key_env: SCRIPTED_UPSTREAM_KEY}"
        )
        config.write_text(
            f"deployments:\n  - {deployment}\nmodels:\n  {MODEL}: {{candidates: [scripted]}}\n"
        )
        env = {"SCRIPTED_UPSTREAM_KEY": "sk-upstream"}
        server = start_server(config, tmp_path / "gateway.log", env=env)
        try:
            said = _run_script(server.api, number)
        finally:
            stop_server(server)
        sent = upstream.posted("/v1/chat/completions")
    answer = f"{ANSWER_PREFIX}shunter-{number + 1}-marker"
    for call in ("generate", "stream"):
        assert said[call]["text"] == answer, said
        assert said[call]["steps"] == 2  # the tool call, then the answer
        assert len(said[call]["dropped"]) == 2
        for dropped in said[call]["dropped"]:
            assert "eager_input_streaming" in dropped.split(","), said
    assert len(sent) == 4
    assert [body.get("stream", False) for body in sent] == [False, False, True, True]
    assert all("eager_input_streaming" not in json.dumps(body) for body in sent)
    assert all(body["tools"][0]["function"]["name"] == "lookup_marker" for body in sent)
