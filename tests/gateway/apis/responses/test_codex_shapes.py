"""What Codex sends to ``/v1/responses``, with the official openai SDK against a real
`shunter serve` in front of a scripted chat upstream on loopback: ``namespace`` tools
flattened and their calls answered with their namespace, ``custom`` tools as one-string
functions answered as ``custom_tool_call`` items, ``additional_tools`` input items, hosted
tools dropped and named in ``x-shunter-dropped`` (or refused, by setting), reasoning both
ways, and the response fields OpenAI always sends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.gateway.apis.responses.test_schema import (
    event_violations,
    events,
    response_violations,
)

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"
SPAWN: Any = {
    "type": "function",
    "name": "spawn_agent",
    "description": "Spawn an agent.",
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
}
NAMESPACE: Any = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Agents.",
    "tools": [SPAWN],
}
APPLY_PATCH: Any = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"},
}
SHELL: Any = {
    "type": "function",
    "name": "shell",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
}
CODEX_TOOLS: Any = [NAMESPACE, {"type": "web_search"}, APPLY_PATCH]
SCRIPT = [
    Turn(
        reasoning="I should add the file.", calls=(("apply_patch", json.dumps({"input": PATCH})),)
    ),
    Turn(
        reasoning="Now ask a helper.", calls=(("multi_agent_v1__spawn_agent", '{"message":"go"}'),)
    ),
    Turn(text="Done."),
]


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(script=list(SCRIPT)) as server:
        yield server


def _serve(folder: Path, upstream: ScriptedUpstream, hosted: str) -> Server:
    (folder / "config.yaml").write_text(
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: scripted,"
        " context_length: 4096}\n"
        "models:\n"
        "  codex: {candidates: [up]}\n"
        "  strict: {candidates: [up], hosted_tools: refuse}\n"
        f"responses: {{hosted_tools: {hosted}}}\n"
    )
    return start_server(folder / "config.yaml", folder / "server.log")


@pytest.fixture
def server(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[Server]:
    server = _serve(tmp_path, upstream, "drop")
    yield server
    stop_server(server)


@pytest.fixture
def sdk(server: Server) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.api, api_key="unused", max_retries=0, timeout=60) as client:
        yield client


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body["tools"]]


def test_codex_tools_reach_a_chat_upstream_and_calls_come_back_in_their_shapes(
    sdk: OpenAI, upstream: ScriptedUpstream
) -> None:
    extra: Any = {"type": "additional_tools", "role": "developer", "tools": [SHELL]}
    given: Any = [extra, {"role": "user", "content": "add hello.txt"}]
    raw = sdk.responses.with_raw_response.create(
        model="codex",
        input=given,
        tools=CODEX_TOOLS,
        reasoning={"effort": "high"},
        text={"verbosity": "low"},
        store=False,
    )
    assert raw.headers["x-shunter-dropped"] == "tools[1]=web_search"
    sent = upstream.bodies[0]
    assert _tool_names(sent) == ["multi_agent_v1__spawn_agent", "apply_patch", "shell"]
    patch_params = sent["tools"][1]["function"]["parameters"]
    assert patch_params["required"] == ["input"]
    assert "start: /.+/s" in patch_params["properties"]["input"]["description"]
    assert (sent["reasoning_effort"], sent["verbosity"]) == ("high", "low")
    assert raw.parse().output[1].type == "custom_tool_call"  # the SDK reads it as one
    data = raw.http_response.json()
    assert response_violations(data) == []
    reasoning, call = data["output"]
    assert reasoning["type"] == "reasoning"
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "I should add the file."}]
    assert call["type"] == "custom_tool_call" and call["name"] == "apply_patch"
    assert call["input"] == PATCH and "namespace" not in call
    assert data["reasoning"] == {"effort": "high", "summary": None}
    assert data["tools"][0] == NAMESPACE and data["tools"][2]["type"] == "custom"


def test_a_streamed_namespaced_call_carries_its_namespace_and_the_reasoning_events(
    server: Server, upstream: ScriptedUpstream
) -> None:
    upstream.script[:] = SCRIPT[1:]
    body = {"model": "codex", "input": "ask a helper", "tools": CODEX_TOOLS, "stream": True}
    answer = httpx.post(f"{server.api}/responses", json=body, timeout=60)
    seen = events(answer.text)
    for name, data in seen:
        assert event_violations(name, data) == [], data
    kinds = [name for name, _ in seen]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert seen[0][1]["response"]["usage"] is None
    text = "".join(d["delta"] for k, d in seen if k == "response.reasoning_text.delta")
    assert text == "Now ask a helper."
    assert "response.reasoning_text.done" in kinds
    done = [d["item"] for k, d in seen if k == "response.output_item.done"]
    assert [item["type"] for item in done] == ["reasoning", "function_call"]
    call = done[1]
    assert (call["name"], call["namespace"]) == ("spawn_agent", "multi_agent_v1")
    assert call["arguments"] == '{"message":"go"}'
    assert kinds[-1] == "response.completed" and seen[-1][1]["response"]["usage"] is not None


def test_a_streamed_custom_call_sends_its_input_events(
    server: Server, upstream: ScriptedUpstream
) -> None:
    body = {"model": "codex", "input": "patch", "tools": CODEX_TOOLS, "stream": True}
    seen = events(httpx.post(f"{server.api}/responses", json=body, timeout=60).text)
    for name, data in seen:
        assert event_violations(name, data) == [], data
    inputs = {k: d for k, d in seen if k.startswith("response.custom_tool_call_input")}
    assert inputs["response.custom_tool_call_input.done"]["input"] == PATCH
    assert inputs["response.custom_tool_call_input.delta"]["delta"] == PATCH
    final = seen[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "custom_tool_call"]


def test_calls_and_outputs_in_the_input_reach_the_upstream_under_its_names(
    sdk: OpenAI, upstream: ScriptedUpstream
) -> None:
    upstream.script[:] = SCRIPT[2:]
    history: Any = [
        {"role": "user", "content": "add hello.txt"},
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Success."},
        {
            "type": "function_call",
            "call_id": "c2",
            "name": "spawn_agent",
            "namespace": "multi_agent_v1",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c2", "output": "spawned"},
    ]
    response = sdk.responses.create(model="codex", input=history, tools=CODEX_TOOLS)
    assert response.output_text == "Done."
    messages = upstream.bodies[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    patch = messages[1]["tool_calls"][0]["function"]
    assert patch == {"name": "apply_patch", "arguments": json.dumps({"input": PATCH})}
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "Success."}
    assert messages[3]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"


def test_the_response_echoes_openais_fields_and_defaults(server: Server) -> None:
    body = {"model": "codex", "input": "hi", "store": False}
    answer = httpx.post(f"{server.api}/responses", json=body, timeout=60).json()
    defaults = {
        "temperature": 1.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "max_tool_calls": None,
        "background": False,
        "service_tier": "default",
        "safety_identifier": None,
        "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None},
        "truncation": "disabled",
    }
    assert {k: answer[k] for k in defaults} == defaults
    given = {"temperature": 0.5, "top_p": 0.9, "presence_penalty": 0.5, "prompt_cache_key": "k"}
    answer = httpx.post(f"{server.api}/responses", json={**body, **given}, timeout=60).json()
    assert {k: answer[k] for k in given} == given


def test_a_background_response_is_refused_by_name(sdk: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model="codex", input="hi", background=True)
    assert refused.value.param == "background"


def test_hosted_tools_are_refused_under_the_refuse_setting(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    server = _serve(tmp_path, upstream, "refuse")
    try:
        with (
            OpenAI(base_url=server.api, api_key="unused", max_retries=0) as sdk,
            pytest.raises(openai.BadRequestError) as refused,
        ):
            sdk.responses.create(model="codex", input="hi", tools=CODEX_TOOLS)
    finally:
        stop_server(server)
    assert refused.value.param == "tools[1].type"
    assert upstream.bodies == []


def test_a_prompt_too_long_names_the_input(sdk: OpenAI, upstream: ScriptedUpstream) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model="codex", input="word " * 20_000)
    assert refused.value.code == "context_length_exceeded"
    assert refused.value.param == "input"
    assert upstream.bodies == []


def test_a_model_can_refuse_hosted_tools_on_its_own(
    sdk: OpenAI, upstream: ScriptedUpstream
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model="strict", input="hi", tools=CODEX_TOOLS)
    assert refused.value.param == "tools[1].type"
    assert upstream.bodies == []
