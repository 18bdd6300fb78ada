"""A Gemini client on a model whose ``gemini`` deployment falls back to an OpenAI-wire one,
against a real ``shunter serve``: each deployment gets its own plan (the client's bytes
first, then the translation, which leaves thoughts and thought signatures behind and says
what it dropped; a native stream that fails mid-way is not continued elsewhere), and a
function call the other deployment made goes back to Gemini 3 with the marker it needs, as
in Gemini CLI's own recorded turns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Server, stop_server
from tests.fixtures.gemini_upstream import SIGNATURE, GeminiUpstream
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.gateway.apis.gemini.native_gateway import (
    ASK,
    TOOLS,
    access_line,
    events,
    post,
    serve,
)

AGENTS = Path(__file__).resolve().parents[3] / "fixtures" / "agents"


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


def test_a_fallback_is_translated_and_leaves_the_signature_behind(
    server: Server, gemini_up: GeminiUpstream, chat_up: ScriptedUpstream
) -> None:
    call = {
        "functionCall": {"id": "fc_1", "name": "get_weather", "args": {"city": "Paris"}},
        "thoughtSignature": SIGNATURE,
    }
    answered = {
        "functionResponse": {"id": "fc_1", "name": "get_weather", "response": {"temp_c": 21}}
    }
    thought = {"text": "Paris, then.", "thought": True}
    model = {"role": "model", "parts": [thought, call]}
    turns = [ASK, model, {"role": "user", "parts": [answered]}]
    body = json.dumps({"contents": turns, "tools": TOOLS}).encode()
    chat_up.bodies.clear()
    answer = post(server, "mixed", "generateContent", body, "req-native-mixed")
    assert answer.status_code == 200, answer.text
    tried = gemini_up.last()
    assert tried.path == "/v1beta/models/unavailable:generateContent" and tried.raw == body
    sent = chat_up.bodies[-1]
    assert SIGNATURE not in json.dumps(sent) and "thoughtSignature" not in json.dumps(sent)
    assert "Paris, then." not in json.dumps(sent)  # a thought is Gemini's own
    assert sent["messages"][1]["tool_calls"][0]["id"] == "fc_1"
    assert sent["messages"][2] == {
        "role": "tool",
        "tool_call_id": "fc_1",
        "content": '{"temp_c": 21}',
    }
    said = answer.json()["candidates"][0]
    assert said["content"]["parts"] == [{"text": "From the other upstream."}]
    assert answer.headers["x-shunter-deployment"] == "chat"
    line = access_line(server, "req-native-mixed")
    assert line["deployment"] == "chat"


def test_a_streamed_fallback_is_translated_and_says_what_it_dropped(
    server: Server, gemini_up: GeminiUpstream, chat_up: ScriptedUpstream
) -> None:
    body = {
        "contents": [ASK],
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
    }
    raw = json.dumps(body).encode()
    chat_up.script[:] = [Turn(text="From the other upstream.")]
    chat_up.bodies.clear()
    answer = post(server, "mixed", "streamGenerateContent", raw, alt="sse")
    assert answer.status_code == 200, answer.text
    assert gemini_up.last("streamGenerateContent").raw == raw  # tried natively first
    assert answer.headers["x-shunter-dropped"] == "safetySettings"
    said = events(answer.text)
    text = "".join(p.get("text", "") for e in said for p in e["candidates"][0]["content"]["parts"])
    assert text == "From the other upstream."
    assert said[-1]["candidates"][0]["finishReason"] == "STOP"
    assert chat_up.bodies[-1]["stream"] is True and "safetySettings" not in chat_up.bodies[-1]


def test_a_native_stream_that_fails_mid_way_is_not_continued_elsewhere(
    server: Server, chat_up: ScriptedUpstream
) -> None:
    chat_up.bodies.clear()
    answer = post(
        server,
        "cut-mixed",
        "streamGenerateContent",
        b'{"contents": [{"parts": [{"text": "hi"}]}]}',
        alt="sse",
    )
    assert answer.status_code == 200
    said = events(answer.text)
    assert said[0]["candidates"][0]["content"]["parts"] == [{"text": "Hello "}]
    assert said[-1]["error"]["status"] == "UNAVAILABLE"
    assert chat_up.bodies == []  # Gemini's own events have no chat turn to resume from


def test_a_call_made_elsewhere_goes_back_to_gemini_as_gemini_3_takes_it(
    server: Server, gemini_up: GeminiUpstream, chat_up: ScriptedUpstream
) -> None:
    chat_up.script[:] = [Turn(calls=(("get_weather", '{"city": "Paris"}'),))]
    first = post(
        server, "mixed", "generateContent", json.dumps({"contents": [ASK], "tools": TOOLS}).encode()
    )
    assert first.status_code == 200, first.text
    made = first.json()["candidates"][0]["content"]
    assert [p["functionCall"]["name"] for p in made["parts"]] == ["get_weather"]
    assert "thoughtSignature" not in made["parts"][0]  # the other upstream signs nothing
    answered = {
        "functionResponse": {
            "id": made["parts"][0]["functionCall"]["id"],
            "name": "get_weather",
            "response": {"temp_c": 21},
        }
    }
    turns = [ASK, made, {"role": "user", "parts": [answered]}]
    second = post(
        server, "gem", "generateContent", json.dumps({"contents": turns, "tools": TOOLS}).encode()
    )
    assert second.status_code == 200, second.text
    sent = gemini_up.last().body["contents"][1]["parts"][0]
    assert sent["thoughtSignature"] == "skip_thought_signature_validator"


def test_what_only_google_takes_is_refused_by_name_on_a_fallback(
    server: Server, gemini_up: GeminiUpstream
) -> None:
    body = json.dumps({"contents": [ASK], "cachedContent": "cachedContents/abc123"}).encode()
    answer = post(server, "mixed", "generateContent", body)
    assert gemini_up.last().raw == body  # the gemini deployment was offered it as sent
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and error["message"].startswith("cachedContent")
    assert error["details"][0]["fieldViolations"][0]["field"] == "cachedContent"


@pytest.mark.parametrize("turn", [1, 2])
def test_what_gemini_cli_sends_goes_up_as_sent(
    server: Server, gemini_up: GeminiUpstream, turn: int
) -> None:
    captured = json.loads((AGENTS / f"gemini-cli-generate-turn{turn}.json").read_text())
    raw = json.dumps(captured["body"], indent=1).encode()
    answer = post(server, "gem", "streamGenerateContent", raw, alt="sse")
    assert answer.status_code == 200, answer.text
    seen = gemini_up.last("streamGenerateContent")
    if turn == 1:
        assert seen.raw == raw
        return
    # its first turn was answered by a chat upstream: the call it made is unsigned, and
    # Gemini 3 takes it only with the marker, the one change made to what it sent
    expected = json.loads(raw)
    expected["contents"][1]["parts"][0]["thoughtSignature"] = "skip_thought_signature_validator"
    assert seen.body == expected
    tail = raw[raw.index(b'"systemInstruction"') :]
    assert seen.raw.endswith(tail)  # the rest byte for byte
