"""Request shapes of the Open Responses specification on ``/v1/responses``, with the
official openai SDK (and raw HTTP where a ``null`` matters) against a real `shunter serve`
in front of a scripted chat upstream on loopback: an ``allowed_tools`` choice reaches the
upstream as the allowed tools alone, and a ``json_schema`` text format is echoed with each
of its fields."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response

from tests.conftest import Server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn, gateway_over


def _tool(name: str) -> Any:
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}
    return {"type": "function", "name": name, "parameters": parameters, "strict": False}


TOOLS: Any = [_tool("get_weather"), _tool("get_time")]


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    call = Turn(calls=(("get_weather", '{"city": "Oslo"}'),))
    with ScriptedUpstream(script=[call]) as server:
        yield server


@pytest.fixture(scope="module")
def server(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with gateway_over(upstream, tmp_path_factory.mktemp("open-shapes")) as server:
        yield server


@pytest.fixture
def sdk(server: Server, upstream: ScriptedUpstream) -> Iterator[OpenAI]:
    upstream.bodies.clear()
    with OpenAI(base_url=server.api, api_key="unused", max_retries=0, timeout=60) as client:
        yield client


@pytest.mark.parametrize("stream", [False, True])
def test_allowed_tools_offer_the_upstream_only_those_tools(
    sdk: OpenAI, upstream: ScriptedUpstream, stream: bool
) -> None:
    choice: Any = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "get_weather"}],
    }
    if stream:
        with sdk.responses.stream(model="agent", input="w?", tools=TOOLS, tool_choice=choice) as s:
            response: Response = s.get_final_response()
    else:
        response = sdk.responses.create(model="agent", input="w?", tools=TOOLS, tool_choice=choice)
    asked = upstream.bodies[0]
    assert [tool["function"]["name"] for tool in asked["tools"]] == ["get_weather"]
    assert asked["tool_choice"] == "required"
    assert not isinstance(response.tool_choice, str)
    assert response.tool_choice.model_dump(exclude_none=True) == choice
    assert [item.type for item in response.output] == ["function_call"]


def test_allowed_tools_naming_a_tool_not_offered_is_refused_by_name(sdk: OpenAI) -> None:
    choice: Any = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "x"}],
    }
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model="agent", input="w?", tools=TOOLS, tool_choice=choice)
    assert refused.value.param == "tool_choice.tools[0]"


def test_a_json_schema_format_is_echoed_with_each_field(server: Server) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    text = {"format": {"type": "json_schema", "name": "answer", "schema": schema}}
    body = {"model": "agent", "input": "json", "text": text}
    echoed = httpx.post(f"{server.api}/responses", json=body, timeout=60).json()["text"]
    assert echoed["format"] == {
        "type": "json_schema",
        "name": "answer",
        "description": None,
        "schema": schema,
        "strict": False,
    }
