"""The scripted upstream follows its script on what the agent CLIs really send.

The bodies are the CLIs' own first and second requests, captured from Claude Code, Codex and
Gemini CLI (``tests/fixtures/agents``); they are posted over HTTP, whole and streamed, and
the chat wire (which no CLI speaks itself) is read back with the ``openai`` SDK.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fixtures.agent_turns import ANSWER_PREFIX, Script
from tests.fixtures.agent_upstream import AgentUpstream
from tests.fixtures.agent_wire import SIGNATURE

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
COMMAND = "echo shunter-$((41+1))-marker"  # what the captures' second turns ran


def captured(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((CAPTURED / name).read_text())["body"]
    return body


@pytest.fixture
def upstream() -> Iterator[AgentUpstream]:
    with AgentUpstream(Script(COMMAND)) as server:
        yield server


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    frames = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return [json.loads(frame) for frame in frames if frame != "[DONE]"]


def test_claude_code_is_asked_to_run_bash_then_answered_with_its_output(
    upstream: AgentUpstream,
) -> None:
    first = httpx.post(f"{upstream.url}/v1/messages?beta=true", json=captured(
        "claude-code-messages-turn1.json"))  # fmt: skip
    events = _events(first)
    opened = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    arguments = "".join(
        e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"
    )
    assert opened[0]["name"] == "Bash" and json.loads(arguments) == {"command": COMMAND}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"

    second = captured("claude-code-messages-turn2.json")
    answer = httpx.post(f"{upstream.url}/v1/messages", json={**second, "stream": False}).json()
    assert answer["content"] == [{"type": "text", "text": ANSWER_PREFIX + "shunter-42-marker"}]


def test_codex_is_asked_to_run_its_code_tool_then_answered_with_its_output(
    upstream: AgentUpstream,
) -> None:
    first = httpx.post(f"{upstream.url}/v1/responses", json=captured("codex-responses-turn1.json"))
    done = _events(first)[-1]["response"]["output"][0]
    assert (done["type"], done["namespace"], done["name"]) == (
        "custom_tool_call",
        "functions",
        "exec",
    )
    assert f"tools.exec_command({{cmd: {json.dumps(COMMAND)}}})" in done["input"]

    second = captured("codex-responses-turn2.json")
    answer = httpx.post(f"{upstream.url}/v1/responses", json={**second, "stream": False}).json()
    text = answer["output"][0]["content"][0]["text"]
    assert text.startswith(ANSWER_PREFIX) and text.endswith("shunter-42-marker")


def test_gemini_cli_is_asked_to_run_its_shell_tool_with_a_signed_call(
    upstream: AgentUpstream,
) -> None:
    url = f"{upstream.url}/v1beta/models/m:streamGenerateContent?alt=sse"
    events = _events(httpx.post(url, json=captured("gemini-cli-generate-turn1.json")))
    (part,) = events[-1]["candidates"][0]["content"]["parts"]
    assert part["functionCall"]["name"] == "run_shell_command"
    assert part["functionCall"]["args"] == {"command": COMMAND}
    assert part["thoughtSignature"] == SIGNATURE
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"

    second = captured("gemini-cli-generate-turn2.json")
    url = f"{upstream.url}/v1beta/models/m:generateContent"
    answer = httpx.post(url, json=second).json()
    text = answer["candidates"][0]["content"]["parts"][0]["text"]
    assert text.startswith(ANSWER_PREFIX) and "shunter-4242-marker" in text


def test_a_chat_client_streams_the_shell_call_then_the_answer(upstream: AgentUpstream) -> None:
    # closed at the end: an unclosed client leaves its pooled connection to the collector
    with openai.OpenAI(base_url=f"{upstream.url}/v1", api_key="unused") as client:
        bash = captured("claude-code-messages-turn1.json")["tools"][1]
        tools: Any = [{"type": "function", "function": {
            "name": bash["name"], "parameters": bash["input_schema"]}}]  # fmt: skip
        messages: Any = [{"role": "user", "content": "run it"}]
        stream = client.chat.completions.create(
            model="m", messages=messages, tools=tools, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = list(stream)
        calls = [
            c for chunk in chunks if chunk.choices for c in chunk.choices[0].delta.tool_calls or []
        ]
        assert calls[0].function is not None and calls[0].function.name == "Bash"
        arguments = "".join(c.function.arguments or "" for c in calls if c.function is not None)
        assert json.loads(arguments) == {"command": COMMAND}
        assert chunks[-1].usage is not None

        call = {"id": calls[0].id, "type": "function",
                "function": {"name": "Bash", "arguments": arguments}}  # fmt: skip
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": calls[0].id, "content": "shunter-42-marker\n"},
        ]
        answer = client.chat.completions.create(model="m", messages=messages, tools=tools)
        assert answer.choices[0].message.content == ANSWER_PREFIX + "shunter-42-marker"
