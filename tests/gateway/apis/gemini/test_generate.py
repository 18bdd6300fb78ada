"""The Gemini API over HTTP against a real ``shunter serve`` whose model is an ``openai``
deployment in front of a scripted chat upstream: what the upstream was sent (the
translation), what the client got (whole, streamed as SSE and as a JSON array), function
calls both ways, JSON output, token counts, the model listings, and refusals in Google's
shape naming the field as Gemini does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.admission.keys import KeyRing
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.redis_server import RedisServer

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "agents"
MASTER = "sk-master-gemini"
BASE = "/v1beta/models/agent"
HI = [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "OBJECT",
        "properties": {
            "city": {"type": "STRING", "enum": ["Paris", "Oslo"]},
            "days": {"type": "INTEGER", "nullable": True, "maxItems": "3"},
        },
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(script=[Turn(text="Fine.")]) as server:
        yield server


@pytest.fixture(scope="module")
def server(
    upstream: ScriptedUpstream,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("gemini")
    (folder / "config.yaml").write_text(
        "responses: {hosted_tools: drop}\n"
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: scripted,"
        " context_length: 32768}\n"
        "models:\n"
        "  agent: {candidates: [up]}\n"
        "  strict: {candidates: [up], hosted_tools: refuse}\n"
    )
    env = {"SHUNTER_MASTER_KEY": MASTER, "SHUNTER_REDIS_URL": redis_server.url}
    server = start_server(folder / "config.yaml", folder / "server.log", env=env)
    yield server
    stop_server(server)


def script(upstream: ScriptedUpstream, *turns: Turn) -> None:
    upstream.script[:] = list(turns)
    upstream.bodies.clear()


def post(server: Server, path: str, body: Any, **params: str) -> httpx.Response:
    headers = {"x-goog-api-key": MASTER}
    url = f"{server.base_url}{path}"
    return httpx.post(url, json=body, headers=headers, params=params, timeout=60)


def test_a_whole_answer_and_what_the_upstream_was_sent(
    server: Server, upstream: ScriptedUpstream
) -> None:
    script(upstream, Turn(reasoning="Hm.", text="Sunny."))
    body = {
        "systemInstruction": {"parts": [{"text": "Be brief."}, {"text": "Be kind."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Hello"}, {"text": "Weather?"}]},
            {"role": "model", "parts": [{"text": "Which city?"}]},
            {"role": "user", "parts": [{"text": "Paris"}]},
        ],
        "generationConfig": {
            "temperature": 0.5,
            "topP": 0.9,
            "topK": 20,
            "maxOutputTokens": 50,
            "stopSequences": ["END"],
            "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
        },
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
    }
    answer = post(server, f"{BASE}:generateContent", body)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-shunter-dropped"] == "safetySettings"
    said = answer.json()
    candidate = said["candidates"][0]
    assert candidate["content"] == {
        "role": "model",
        "parts": [{"text": "Hm.", "thought": True}, {"text": "Sunny."}],
    }
    assert candidate["finishReason"] == "STOP"
    assert said["usageMetadata"] == {
        "promptTokenCount": 11,
        "candidatesTokenCount": 7,
        "totalTokenCount": 18,
    }
    sent = upstream.bodies[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief.\n\nBe kind."},
        {"role": "user", "content": "Hello\n\nWeather?"},
        {"role": "assistant", "content": "Which city?"},
        {"role": "user", "content": "Paris"},
    ]
    assert sent["temperature"] == 0.5 and sent["top_p"] == 0.9 and sent["top_k"] == 20
    assert sent["max_tokens"] == 50 and sent["stop"] == ["END"]
    assert sent["reasoning_effort"] == "low"


def test_thoughts_are_shown_only_when_asked_for(server: Server, upstream: ScriptedUpstream) -> None:
    script(upstream, Turn(reasoning="Hm.", text="Sunny."))
    answer = post(server, f"{BASE}:generateContent", {"contents": HI})
    assert answer.json()["candidates"][0]["content"]["parts"] == [{"text": "Sunny."}]


def _sse(text: str) -> list[dict[str, Any]]:
    assert "\r\n\r\n" in text
    return [json.loads(line[6:]) for line in text.split("\r\n") if line.startswith("data: ")]


def test_a_stream_as_server_sent_events_and_as_a_json_array(
    server: Server, upstream: ScriptedUpstream
) -> None:
    script(upstream, Turn(text="Sunny in Paris."))
    streamed = post(server, f"{BASE}:streamGenerateContent", {"contents": HI}, alt="sse")
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = _sse(streamed.text)
    text = "".join(
        part.get("text", "") for e in events for part in e["candidates"][0]["content"]["parts"]
    )
    assert text == "Sunny in Paris."
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    assert events[-1]["usageMetadata"]["totalTokenCount"] == 18
    assert all("finishReason" not in e["candidates"][0] for e in events[:-1])
    array = post(server, f"{BASE}:streamGenerateContent", {"contents": HI})
    assert array.headers["content-type"].startswith("application/json")
    elements = array.json()
    assert [e["candidates"][0]["content"] for e in elements] == [
        e["candidates"][0]["content"] for e in events
    ]


def test_a_function_call_round_trip(server: Server, upstream: ScriptedUpstream) -> None:
    script(upstream, Turn(calls=(("get_weather", '{"city": "Paris"}'),)), Turn(text="Sunny."))
    tools = [{"functionDeclarations": [WEATHER]}]
    config = {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}
    first = post(
        server, f"{BASE}:generateContent", {"contents": HI, "tools": tools, "toolConfig": config}
    )
    assert first.status_code == 200, first.text
    part = first.json()["candidates"][0]["content"]["parts"][0]
    assert part == {
        "functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_0"}
    }
    sent = upstream.bodies[-1]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["tools"][0]["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "Oslo"]},
            "days": {"type": ["integer", "null"], "maxItems": 3},
        },
        "required": ["city"],
    }
    # the call comes back without its id, as some clients send it: matched by name
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    reply = {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}}
    history = [*HI, {"role": "model", "parts": [call]}, {"role": "user", "parts": [reply]}]
    second = post(server, f"{BASE}:generateContent", {"contents": history, "tools": tools})
    assert second.json()["candidates"][0]["content"]["parts"] == [{"text": "Sunny."}]
    messages = upstream.bodies[-1]["messages"]
    assert messages[1]["tool_calls"][0]["id"] == messages[2]["tool_call_id"] == "call_1_0"
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "call_1_0",
        "content": '{"output": "sunny"}',
    }


def test_a_streamed_function_call_comes_whole(server: Server, upstream: ScriptedUpstream) -> None:
    script(upstream, Turn(calls=(("get_weather", '{"city": "Oslo"}'),)))
    body = {"contents": HI, "tools": [{"functionDeclarations": [WEATHER]}]}
    events = _sse(post(server, f"{BASE}:streamGenerateContent", body, alt="sse").text)
    calls = [
        part["functionCall"]
        for e in events
        for part in e["candidates"][0]["content"]["parts"]
        if "functionCall" in part
    ]
    assert calls == [{"name": "get_weather", "args": {"city": "Oslo"}, "id": "call_0"}]


def test_json_output_with_a_schema(server: Server, upstream: ScriptedUpstream) -> None:
    script(upstream, Turn(text='{"city": "Paris"}'))
    config = {
        "responseMimeType": "application/json",
        "responseSchema": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}},
    }
    answer = post(server, f"{BASE}:generateContent", {"contents": HI, "generationConfig": config})
    assert answer.json()["candidates"][0]["content"]["parts"][0]["text"] == '{"city": "Paris"}'
    assert upstream.bodies[-1]["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "response",
            "schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    raw_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    config = {"responseMimeType": "application/json", "responseJsonSchema": raw_schema}
    post(server, f"{BASE}:generateContent", {"contents": HI, "generationConfig": config})
    assert upstream.bodies[-1]["response_format"]["json_schema"]["schema"] == raw_schema


def test_hosted_tools_are_dropped_or_refused_by_the_setting(
    server: Server, upstream: ScriptedUpstream
) -> None:
    script(upstream, Turn(text="Fine."))
    tools = [{"googleSearch": {}}, {"functionDeclarations": [WEATHER]}]
    answer = post(server, f"{BASE}:generateContent", {"contents": HI, "tools": tools})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-shunter-dropped"] == "tools[0].googleSearch"
    assert [t["function"]["name"] for t in upstream.bodies[-1]["tools"]] == ["get_weather"]
    refused = post(
        server, "/v1beta/models/strict:generateContent", {"contents": HI, "tools": tools}
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["details"][0]["fieldViolations"][0]["field"] == (
        "tools[0].googleSearch"
    )


def test_count_tokens(server: Server) -> None:
    counted = post(server, f"{BASE}:countTokens", {"contents": HI})
    assert counted.status_code == 200, counted.text
    assert counted.json()["totalTokens"] > 0
    assert counted.headers["x-shunter-token-count"] == "estimated"
    nested = post(
        server,
        f"{BASE}:countTokens",
        {"generateContentRequest": {"model": "models/agent", "contents": HI}},
    )
    assert nested.json() == counted.json()


def test_the_model_listings(server: Server) -> None:
    headers = {"x-goog-api-key": MASTER}
    listed = httpx.get(f"{server.base_url}/v1beta/models", headers=headers).json()
    names = [model["name"] for model in listed["models"]]
    assert names == ["models/agent", "models/strict"]
    one = httpx.get(f"{server.base_url}/v1beta/models/agent", headers=headers).json()
    assert one["inputTokenLimit"] == 32768
    assert one["supportedGenerationMethods"] == [
        "generateContent",
        "streamGenerateContent",
        "countTokens",
    ]
    missing = httpx.get(f"{server.base_url}/v1beta/models/nope", headers=headers)
    assert missing.status_code == 404
    assert missing.json()["error"]["status"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {
                "contents": [
                    {
                        "role": "user",
                        "parts": [
                            {"text": "a"},
                            {"inlineData": {"mimeType": "video/mp4", "data": "AA=="}},
                        ],
                    }
                ]
            },
            "contents[0].parts[1].inlineData",
        ),
        (
            {
                "contents": [
                    {"parts": [{"fileData": {"fileUri": "gs://b/f", "mimeType": "image/png"}}]}
                ]
            },
            "contents[0].parts[0].fileData",
        ),
        (
            {"contents": HI, "generationConfig": {"candidateCount": 2}},
            "generationConfig.candidateCount",
        ),
        ({"contents": HI, "cachedContent": "cachedContents/abc"}, "cachedContent"),
        ({"contents": [{"role": "user", "parts": [{"text": 5}]}]}, "contents[0].parts[0].text"),
        ({"contents": HI, "generationConfig": {"topK": "many"}}, "generationConfig.topK"),
    ],
    ids=["inline-video", "file-data", "candidates", "cached", "bad-text", "bad-topk"],
)
def test_a_refusal_names_the_field_as_gemini_does(server: Server, body: Any, field: str) -> None:
    answer = post(server, f"{BASE}:generateContent", body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    assert field in error["message"]
    assert error["details"][0]["fieldViolations"][0]["field"] == field


@pytest.fixture(scope="module")
def strict_only(redis_server: RedisServer) -> str:
    """A key that may use the model ``strict`` only."""

    async def create() -> str:
        store = RedisStateStore.from_url(redis_server.url, prefix="shunter")
        try:
            return (await KeyRing(store).create("strict-only", models=("strict",)))[0]
        finally:
            await store.aclose()

    return asyncio.run(create())


def test_keys_unknown_models_and_the_query_key(server: Server, strict_only: str) -> None:
    url = f"{server.base_url}{BASE}:generateContent"
    body = {"contents": HI}
    nobody = httpx.post(url, json=body)
    assert nobody.status_code == 401
    assert nobody.json()["error"]["status"] == "UNAUTHENTICATED"
    wrong = httpx.post(url, json=body, headers={"x-goog-api-key": "sk-wrong"})
    assert wrong.status_code == 401
    narrow = httpx.post(url, json=body, headers={"x-goog-api-key": strict_only}, timeout=60)
    assert narrow.status_code == 403, narrow.text
    assert narrow.json()["error"]["status"] == "PERMISSION_DENIED"
    unknown = post(server, "/v1beta/models/nope:generateContent", body)
    assert unknown.status_code == 404 and unknown.json()["error"]["status"] == "NOT_FOUND"
    no_method = post(server, f"{BASE}:embedContent", body)
    assert no_method.status_code == 404
    by_query = httpx.post(url, json=body, params={"key": MASTER}, timeout=60)
    assert by_query.status_code == 200, by_query.text
    bearer = httpx.post(url, json=body, headers={"authorization": f"Bearer {MASTER}"}, timeout=60)
    assert bearer.status_code == 200
    assert MASTER not in server.log()


@pytest.mark.parametrize("turn", [1, 2])
def test_what_gemini_cli_sends_maps_whole(
    server: Server, upstream: ScriptedUpstream, turn: int
) -> None:
    captured = json.loads((FIXTURES / f"gemini-cli-generate-turn{turn}.json").read_text())
    script(upstream, Turn(text="ok"))
    answer = post(server, f"{BASE}:streamGenerateContent", captured["body"], alt="sse")
    assert answer.status_code == 200, answer.text
    assert "x-shunter-dropped" not in answer.headers
    sent = upstream.bodies[-1]
    assert len(sent["tools"]) == 15 and sent["top_k"] == 64
    assert sent["messages"][0]["role"] == "system"
    if turn == 2:
        call, result = sent["messages"][-2:]
        assert call["tool_calls"][0]["function"]["name"] == "run_shell_command"
        assert result["role"] == "tool"
        assert (
            result["tool_call_id"]
            == call["tool_calls"][0]["id"]
            == ("run_shell_command_1796663051006_0")
        )
        assert "shunter-4242-marker" in result["content"]
