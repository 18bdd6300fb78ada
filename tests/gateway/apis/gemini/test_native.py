"""Gemini clients through a ``gemini`` deployment, natively, against a real ``shunter
serve`` in front of a recording Gemini upstream: the body arrives byte for byte (but the
model, in the URL), the answer comes back as the upstream sent it (whole, server-sent
events, or the JSON array), usage is billed and the access line written; a function call's
thought signature survives a round trip with the ``google-genai`` SDK and with raw HTTP;
the upstream's refusals, and a failure mid-stream, reach the client in Google's shape.
(A model that falls back from its Gemini deployment: :mod:`.test_native_fallback`.)"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import pytest
from google import genai
from google.genai import errors, types

from tests.conftest import Server, stop_server
from tests.fixtures.gemini_upstream import SIGNATURE, USAGE, GeminiUpstream
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.gateway.apis.gemini.native_gateway import (
    ASK,
    KEY,
    MASTER,
    TOOLS,
    UPSTREAM_MODEL,
    WEATHER,
    access_line,
    events,
    metric,
    post,
    serve,
)
from tests.waiting import eventually

# what only Google's API reads, written as no serializer would: the bytes must survive
BODY = (
    b'{ "contents" : [{"role":"user","parts":[{"text":"Weather in Paris, \\u00e9t\\u00e9?"}]}],\n'
    b' "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],'
    b' "cachedContent": "cachedContents/abc123",\n'
    b' "generationConfig": {"temperature": 1.0E0, "maxOutputTokens": 64,'
    b' "mediaResolution": "MEDIA_RESOLUTION_LOW"},'
    b' "labels": {"team": "caf\xc3\xa9"}}'
)


@pytest.fixture(scope="module")
def gemini_up() -> Iterator[GeminiUpstream]:
    with GeminiUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def chat_up() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(script=[Turn(text="From the other upstream.")]) as server:
        yield server


@pytest.fixture(scope="module")
def server(
    gemini_up: GeminiUpstream, chat_up: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    started = serve(gemini_up, chat_up, tmp_path_factory.mktemp("gemini-native"))
    yield started
    stop_server(started)


def spent(server: Server, deployment: str) -> float:
    return metric(server, "shunter_cost_usd_total", deployment=deployment)


def tokens(server: Server, kind: str) -> float:
    return metric(server, "gen_ai_client_token_usage_sum", deployment="gem", gen_ai_token_type=kind)


def test_a_whole_request_goes_up_byte_for_byte_and_comes_back_as_sent(
    server: Server, gemini_up: GeminiUpstream
) -> None:
    before = spent(server, "gem")
    given, made = tokens(server, "input"), tokens(server, "output")
    answer = post(server, "gem", "generateContent", BODY, "req-native-whole")
    assert answer.status_code == 200, answer.text
    seen = gemini_up.last()
    assert seen.raw == BODY
    assert seen.path == f"/v1beta/models/{UPSTREAM_MODEL}:generateContent"
    assert seen.headers["x-goog-api-key"] == KEY  # the deployment's key, not the client's
    assert "x-shunter-dropped" not in answer.headers
    assert answer.headers["x-shunter-deployment"] == "gem"
    assert answer.headers["x-shunter-upstream-model"] == UPSTREAM_MODEL
    expected = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "Hello from Gemini"}]},
                "index": 0,
                "finishReason": "STOP",
            }
        ],
        "modelVersion": "gemini-test",
        "usageMetadata": USAGE,
        "responseId": "resp-gemini-1",
    }
    assert answer.content == json.dumps(expected).encode()  # the upstream's own bytes
    assert eventually(lambda: spent(server, "gem") - before > 0)
    assert spent(server, "gem") - before == pytest.approx((11 * 2 + 12 * 12) / 1e6)
    assert (tokens(server, "input") - given, tokens(server, "output") - made) == (11, 12)
    line = access_line(server, "req-native-whole")
    assert line["status"] == 200 and line["model"] == "gem"
    assert line["deployment"] == "gem"
    assert (line["prompt_tokens"], line["completion_tokens"]) == (11, 12)
    assert KEY not in server.log() and MASTER not in server.log()


def test_a_stream_with_alt_sse_is_the_upstreams_events(
    server: Server, gemini_up: GeminiUpstream
) -> None:
    before = spent(server, "gem")
    answer = post(server, "gem", "streamGenerateContent", BODY, "req-native-sse", alt="sse")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/event-stream")
    seen = gemini_up.last("streamGenerateContent")
    assert seen.raw == BODY
    assert seen.path == f"/v1beta/models/{UPSTREAM_MODEL}:streamGenerateContent?alt=sse"
    assert answer.content == gemini_up.streamed[-1].replace(b"\r\n", b"\n")
    said = events(answer.text)
    assert "".join(e["candidates"][0]["content"]["parts"][0]["text"] for e in said) == (
        "Hello from Gemini"
    )
    assert eventually(lambda: spent(server, "gem") - before > 0)
    assert spent(server, "gem") - before == pytest.approx((11 * 2 + 12 * 12) / 1e6)
    line = access_line(server, "req-native-sse")
    assert line["status"] == 200 and line["deployment"] == "gem"
    assert (line["prompt_tokens"], line["completion_tokens"]) == (11, 12)


def test_a_stream_without_alt_is_one_json_array_of_the_upstreams_events(
    server: Server, gemini_up: GeminiUpstream
) -> None:
    url = f"{server.base_url}/v1beta/models/gem:streamGenerateContent"
    headers = {"content-type": "application/json", "x-request-id": "req-native-array"}
    answer = httpx.post(url, content=BODY, headers=headers, params={"key": MASTER}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    seen = gemini_up.last("streamGenerateContent")
    assert seen.raw == BODY and seen.path.endswith(":streamGenerateContent?alt=sse")
    assert seen.headers["x-goog-api-key"] == KEY  # the client's key stays here
    assert answer.json() == events(gemini_up.streamed[-1].decode())
    line = access_line(server, "req-native-array")
    assert line["status"] == 200 and line["completion_tokens"] == 12


def test_count_tokens_goes_up_as_sent(server: Server, gemini_up: GeminiUpstream) -> None:
    plain = b'{"contents": [{"parts": [{"text": "hi \\u00e9"}]}]}'
    counted = post(server, "gem", "countTokens", plain)
    assert counted.status_code == 200, counted.text
    assert counted.json() == {"totalTokens": 42}
    assert counted.headers["x-shunter-token-count"] == "upstream"
    seen = gemini_up.last("countTokens")
    assert seen.raw == plain and seen.path == f"/v1beta/models/{UPSTREAM_MODEL}:countTokens"
    whole = (
        b'{"generateContentRequest": {"model": "models/gem",'
        b' "contents": [{"parts":[{"text":"hi"}]}]}}'
    )
    counted = post(server, "gem", "countTokens", whole)
    assert counted.status_code == 200 and counted.json() == {"totalTokens": 42}
    inner = gemini_up.last("countTokens").body["generateContentRequest"]
    assert inner["model"] == f"models/{UPSTREAM_MODEL}"


def test_a_thought_signature_survives_a_raw_round_trip(
    server: Server, gemini_up: GeminiUpstream
) -> None:
    first = {"contents": [ASK], "tools": TOOLS}
    answer = post(server, "gem", "streamGenerateContent", json.dumps(first).encode(), alt="sse")
    assert answer.status_code == 200, answer.text
    parts = [part for e in events(answer.text) for part in e["candidates"][0]["content"]["parts"]]
    assert parts[0]["thoughtSignature"] == SIGNATURE
    results = [
        {
            "functionResponse": {
                "id": p["functionCall"]["id"],
                "name": "get_weather",
                "response": {"temp_c": 21},
            }
        }
        for p in parts
    ]
    turns = [ASK, {"role": "model", "parts": parts}, {"role": "user", "parts": results}]
    second = json.dumps({"contents": turns, "tools": TOOLS}, separators=(",", ":")).encode()
    answer = post(server, "gem", "generateContent", second)
    assert answer.status_code == 200, answer.text
    said = answer.json()["candidates"][0]["content"]["parts"]
    assert said == [{"text": 'The tool said: {"temp_c": 21}'}]
    seen = gemini_up.last()
    assert seen.raw == second
    assert f'"thoughtSignature":"{SIGNATURE}"'.encode() in seen.raw


def test_a_thought_signature_survives_the_google_genai_sdk(
    server: Server, gemini_up: GeminiUpstream
) -> None:
    sdk_sent: list[bytes] = []

    def record(request: httpx.Request) -> None:
        sdk_sent.append(request.read())

    hooks = {"event_hooks": {"request": [record]}}
    options = types.HttpOptions(base_url=server.base_url, timeout=60_000, client_args=hooks)
    client = genai.Client(api_key=MASTER, http_options=options)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**WEATHER)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    question = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
    first = client.models.generate_content(model="gem", contents=[question], config=config)
    # the SDK calls /v1; the deployment's own API version is what goes up
    assert gemini_up.last().path == f"/v1beta/models/{UPSTREAM_MODEL}:generateContent"
    assert first.candidates and first.candidates[0].content
    made = first.candidates[0].content.parts or []
    assert made[0].thought_signature == base64.b64decode(SIGNATURE)
    assert made[1].thought_signature is None
    assert [p.function_call.id for p in made if p.function_call] == ["fc_1", "fc_2"]
    replies = [
        types.Part(
            function_response=types.FunctionResponse(
                id=call.id, name=call.name, response={"output": "sunny"}
            )
        )
        for call in first.function_calls or []
    ]
    history = [question, first.candidates[0].content, types.Content(role="user", parts=replies)]
    second = client.models.generate_content(model="gem", contents=history, config=config)
    assert second.text == 'The tool said: {"output": "sunny"}'
    seen = gemini_up.last()
    assert seen.raw == sdk_sent[-1]  # what the SDK wrote, byte for byte
    model_turn = seen.body["contents"][1]
    # the SDK writes bytes as URL-safe base64, which Google reads as it reads its own
    assert base64.urlsafe_b64decode(model_turn["parts"][0]["thoughtSignature"]) == (
        base64.b64decode(SIGNATURE)
    )
    assert "thoughtSignature" not in model_turn["parts"][1]
    streamed = client.models.generate_content_stream(model="gem", contents=history, config=config)
    assert "".join(p.text or "" for p in streamed) == 'The tool said: {"output": "sunny"}'
    assert gemini_up.last("streamGenerateContent").raw == sdk_sent[-1]


@pytest.mark.parametrize("streamed", [False, True])
def test_an_upstream_refusal_reaches_the_client_in_googles_shape(
    server: Server, streamed: bool
) -> None:
    action = "streamGenerateContent" if streamed else "generateContent"
    params = {"alt": "sse"} if streamed else {}
    limited = post(server, "limited", action, BODY, **params)
    assert limited.status_code == 429, limited.text
    error = limited.json()["error"]
    assert error["code"] == 429 and error["status"] == "RESOURCE_EXHAUSTED"
    assert "You exceeded your current quota." in error["message"]
    assert limited.headers["retry-after"] == "37"
    quota = {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []}
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}
    assert error["details"] == [quota, retry]  # what Google's clients read to wait
    # a context refusal teaches the gateway the deployment's limit: one deployment each
    long = post(server, "long-sse" if streamed else "long", action, BODY, **params)
    assert long.status_code == 400, long.text
    error = long.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    assert "exceeds the maximum number of tokens allowed" in error["message"]
    assert KEY not in limited.text + long.text


def test_a_key_google_refuses_is_the_operators_business(server: Server) -> None:
    refused = post(server, "refused", "generateContent", BODY)
    assert refused.status_code == 502, refused.text
    error = refused.json()["error"]
    assert error["status"] == "UNAVAILABLE" and "API key" in error["message"]
    assert "API key not valid" not in error["message"] and KEY not in refused.text
    assert "details" not in error  # Google's ErrorInfo on the key stays in the log


def test_a_field_google_refuses_is_named_as_google_named_it(server: Server) -> None:
    refused = post(server, "unknown", "generateContent", BODY)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and "Unknown name" in error["message"]
    (detail,) = error["details"]
    assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert detail["fieldViolations"][0]["field"] == "generation_config"


def test_the_sdk_reads_an_upstream_refusal_as_its_own(server: Server) -> None:
    options = types.HttpOptions(base_url=server.base_url, timeout=60_000)
    client = genai.Client(api_key=MASTER, http_options=options)
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model="long", contents="hi")
    assert caught.value.code == 400 and caught.value.status == "INVALID_ARGUMENT"
    assert "exceeds the maximum number of tokens" in (caught.value.message or "")
    with pytest.raises(errors.ClientError) as limited:
        list(client.models.generate_content_stream(model="limited", contents="hi"))
    assert limited.value.code == 429 and limited.value.status == "RESOURCE_EXHAUSTED"
    assert limited.value.details["error"]["details"][-1]["retryDelay"] == "37s"


@pytest.mark.parametrize("sse", [True, False])
def test_a_failure_mid_stream_ends_the_stream_in_its_own_framing(server: Server, sse: bool) -> None:
    params = {"alt": "sse"} if sse else {}
    answer = post(server, "cut", "streamGenerateContent", BODY, **params)
    assert answer.status_code == 200
    said = events(answer.text) if sse else answer.json()
    assert said[0]["candidates"][0]["content"]["parts"] == [{"text": "Hello "}]
    assert said[-1]["error"]["code"] == 502 and said[-1]["error"]["status"] == "UNAVAILABLE"
