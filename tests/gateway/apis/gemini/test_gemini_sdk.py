"""The Gemini API with Google's own ``google-genai`` SDK against a real ``shunter serve``:
generation on the tiny GGUF (translated to chat, run by llama.cpp), and on a scripted
chat upstream a function call round trip, a stream, a token count, the model list and an
error, each read back through the SDK's own types."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google import genai
from google.genai import errors, types

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn

MASTER = "sk-master-gemini-sdk"
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city",
    parameters=types.Schema(
        type=types.Type.OBJECT,
        properties={"city": types.Schema(type=types.Type.STRING)},
        required=["city"],
    ),
)
NO_AUTO = types.AutomaticFunctionCallingConfig(disable=True)


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(script=[Turn(text="Fine.")]) as server:
        yield server


@pytest.fixture(scope="module")
def server(
    tiny_model: Path, upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("gemini-sdk")
    (folder / "config.yaml").write_text(
        "deployments:\n"
        f"  - {{name: gen, backend: llamacpp, model: {tiny_model}, n_ctx: 2048, threads: 1}}\n"
        f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: scripted}}\n"
        "models:\n"
        "  tiny: {candidates: [gen]}\n"
        "  agent: {candidates: [up]}\n"
    )
    env = {"SHUNTER_MASTER_KEY": MASTER}
    server = start_server(folder / "config.yaml", folder / "server.log", env=env)
    yield server
    stop_server(server)


def _options(server: Server, **more: str) -> types.HttpOptions:
    return types.HttpOptions(base_url=server.base_url, timeout=120_000, **more)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def client(server: Server) -> genai.Client:
    """The SDK as it comes: it calls /v1."""
    return genai.Client(api_key=MASTER, http_options=_options(server))


def test_generate_and_stream_on_a_local_model(client: genai.Client) -> None:
    config = types.GenerateContentConfig(
        temperature=0, max_output_tokens=6, system_instruction="Be brief."
    )
    whole = client.models.generate_content(model="tiny", contents="Hello!", config=config)
    assert whole.text
    assert whole.candidates and whole.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert whole.usage_metadata and whole.usage_metadata.candidates_token_count == 6
    pieces = list(
        client.models.generate_content_stream(model="tiny", contents="Hello!", config=config)
    )
    assert "".join(piece.text or "" for piece in pieces) == whole.text  # temperature 0
    assert (
        pieces[-1].candidates
        and pieces[-1].candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    )


def test_a_function_call_round_trip(client: genai.Client, upstream: ScriptedUpstream) -> None:
    upstream.script[:] = [Turn(calls=(("get_weather", '{"city": "Paris"}'),)), Turn(text="Sunny.")]
    upstream.bodies.clear()
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])], automatic_function_calling=NO_AUTO
    )
    question = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
    first = client.models.generate_content(model="agent", contents=[question], config=config)
    calls = first.function_calls or []
    assert [(c.name, c.args) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert first.candidates and first.candidates[0].content
    reply = types.Part.from_function_response(name="get_weather", response={"output": "sunny"})
    history = [question, first.candidates[0].content, types.Content(role="user", parts=[reply])]
    second = client.models.generate_content(model="agent", contents=history, config=config)
    assert second.text == "Sunny."
    sent = upstream.bodies[-1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == calls[0].id == sent[2]["tool_call_id"]


def test_a_stream_a_count_and_the_model_list(
    client: genai.Client, upstream: ScriptedUpstream, server: Server
) -> None:
    upstream.script[:] = [Turn(text="Sunny in Paris.")]
    pieces = list(client.models.generate_content_stream(model="agent", contents="Weather?"))
    assert "".join(piece.text or "" for piece in pieces) == "Sunny in Paris."
    assert pieces[-1].usage_metadata and pieces[-1].usage_metadata.total_token_count == 18
    counted = client.models.count_tokens(model="agent", contents="Weather in Paris?")
    assert counted.total_tokens and counted.total_tokens > 0
    # the listings are v1beta's (GET /v1/models is OpenAI's)
    beta = genai.Client(api_key=MASTER, http_options=_options(server, api_version="v1beta"))
    names = [model.name for model in beta.models.list()]
    assert names == ["models/tiny", "models/agent"]
    tiny = beta.models.get(model="tiny")
    assert tiny.input_token_limit == 2048
    assert tiny.supported_actions == ["generateContent", "streamGenerateContent", "countTokens"]


def test_errors_come_as_the_sdks_own(client: genai.Client, server: Server) -> None:
    with pytest.raises(errors.ClientError) as unknown:
        client.models.generate_content(model="nope", contents="hi")
    assert unknown.value.code == 404 and unknown.value.status == "NOT_FOUND"
    config = types.GenerateContentConfig(candidate_count=2)
    with pytest.raises(errors.ClientError) as refused:
        client.models.generate_content(model="agent", contents="hi", config=config)
    assert refused.value.code == 400 and refused.value.status == "INVALID_ARGUMENT"
    assert "generationConfig.candidateCount" in (refused.value.message or "")
    stranger = genai.Client(api_key="sk-wrong", http_options=_options(server))
    with pytest.raises(errors.ClientError) as nobody:
        stranger.models.count_tokens(model="agent", contents="hi")
    assert nobody.value.code == 401 and nobody.value.status == "UNAUTHENTICATED"
