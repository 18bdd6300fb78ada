"""``/v1/messages`` against a real `shunter serve`: passed through byte for byte to a
recording Anthropic upstream; translated for OpenAI-wire upstreams, each field mapped,
refused by name or dropped by the deployment's setting and reported; reasoning both
ways; context overflow in Anthropic's words."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.anthropic_upstream import AnthropicUpstream
from tests.fixtures.fault_upstream import FaultUpstream

MASTER = "sk-master-messages-http"
BETA = "mid-conversation-system-2026-04-07,context-management-2025-06-27"
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAE"
    "hQGAhKmMIQAAAABJRU5ErkJggg=="
)
DROPS = "[metadata, context_management, server_tools, document]"


@pytest.fixture(scope="module")
def anthropic_up() -> Iterator[AnthropicUpstream]:
    with AnthropicUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def openai_up() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def server(
    anthropic_up: AnthropicUpstream,
    openai_up: FaultUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("messages-http")
    oai = f"backend: openai, base_url: '{openai_up.url}'"
    (folder / "config.yaml").write_text(
        "reliability: {retries: 0}\n"
        "deployments:\n"
        f"  - {{name: claude, backend: anthropic, base_url: '{anthropic_up.url}',"
        " api_key_env: UP_KEY, model: claude-up}\n"
        f"  - {{name: oai, {oai}, model: fake}}\n"
        f"  - {{name: lenient, {oai}, model: fake, messages_drop: {DROPS}}}\n"
        f"  - {{name: think, {oai}, model: 'fault:think:3'}}\n"
        f"  - {{name: reason, {oai}, model: 'fault:reason:2'}}\n"
        f"  - {{name: mct, {oai}, model: fake, max_tokens_field: max_completion_tokens}}\n"
        f"  - {{name: small, {oai}, model: fake, context_length: 2000}}\n"
        f"  - {{name: tight, {oai}, model: 'fault:ctx:50'}}\n"
        f"  - {{name: clamps, {oai}, model: fake, context_length: 2000, clamp_output: true}}\n"
        "models:\n"
        "  sonnet: {candidates: [claude]}\n"
        "  demo: {candidates: [oai]}\n"
        "  lenient: {candidates: [lenient]}\n"
        "  think: {candidates: [think]}\n"
        "  reason: {candidates: [reason]}\n"
        "  mct: {candidates: [mct]}\n"
        "  small: {candidates: [small]}\n"
        "  tight: {candidates: [tight]}\n"
        "  clamps: {candidates: [clamps]}\n"
    )
    env = {"SHUNTER_MASTER_KEY": MASTER, "UP_KEY": "sk-upstream"}
    started = start_server(folder / "config.yaml", folder / "server.log", env=env)
    yield started
    stop_server(started)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    headers = {"x-api-key": MASTER, "anthropic-version": "2023-06-01", "anthropic-beta": BETA}
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as client:
        yield client


def post(http: httpx.Client, body: dict[str, Any], path: str = "/v1/messages") -> httpx.Response:
    return http.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


def events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


# what Claude Code sends, and what only Anthropic's own API understands
NATIVE_BODY = (
    b'{"model": "sonnet", "max_tokens": 32000,\n'
    b' "system": [{"type": "text", "text": "You are Claude Code.",'
    b' "cache_control": {"type": "ephemeral"}}],\n'
    b' "messages": [\n'
    b'  {"role": "user", "content": [{"type": "document", "source": {"type": "base64",'
    b' "media_type": "application/pdf", "data": "JVBERi0xLjQK"}},'
    b' {"type": "document", "source": {"type": "text", "media_type": "text/plain",'
    b' "data": "caf\\u00e9 notes"}, "title": "notes"},'
    b' {"type": "text", "text": "Summarise \xc3\xa9t\xc3\xa9",'
    b' "cache_control": {"type": "ephemeral"}}]},\n'
    b'  {"role": "assistant", "content": [{"type": "thinking", "thinking": "Let me search.",'
    b' "signature": "EqQBCkYIBxgCKkDsig=="}, {"type": "server_tool_use", "id": "srvtoolu_01",'
    b' "name": "web_search", "input": {"query": "paris"}}, {"type": "web_search_tool_result",'
    b' "tool_use_id": "srvtoolu_01", "content": [{"type": "web_search_result",'
    b' "url": "https://example.com", "title": "Paris", "encrypted_content": "Eo8B",'
    b' "page_age": null}]}]},\n'
    b'  {"role": "system", "content": "The user changed directory."},\n'
    b'  {"role": "user", "content": [{"type": "search_result", "source": "https://example.com",'
    b' "title": "Paris", "content": [{"type": "text", "text": "Paris is big"}]}]}],\n'
    b' "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],\n'
    b' "thinking": {"type": "enabled", "budget_tokens": 31999},\n'
    b' "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},\n'
    b' "output_config": {"effort": "high"},\n'
    b' "metadata": {"user_id": "{\\"device_id\\":\\"abc\\"}"},\n'
    b' "temperature": 1.0, "a_field_from_the_future": [1e3, 0.10]}'
)


def as_sent(body: bytes) -> bytes:
    """``body`` as the upstream must get it: only ``model`` changed."""
    return body.replace(b'"model": "sonnet"', b'"model": "claude-up"', 1)


def test_a_native_request_arrives_byte_for_byte(
    http: httpx.Client, anthropic_up: AnthropicUpstream
) -> None:
    headers = {"content-type": "application/json"}
    answer = http.post("/v1/messages", content=NATIVE_BODY, headers=headers)
    assert answer.status_code == 200, answer.text
    seen = anthropic_up.last()
    assert seen.raw == as_sent(NATIVE_BODY)
    assert seen.headers["anthropic-beta"] == BETA
    assert seen.headers["anthropic-version"] == "2023-06-01"
    later = http.post(
        "/v1/messages", content=NATIVE_BODY, headers={**headers, "anthropic-version": "2099-01-01"}
    )
    assert later.status_code == 200
    assert anthropic_up.last().headers["anthropic-version"] == "2099-01-01"  # once
    assert "x-shunter-dropped" not in answer.headers
    streamed_body = NATIVE_BODY.replace(
        b'"max_tokens": 32000', b'"max_tokens": 32000, "stream": true'
    )
    with http.stream("POST", "/v1/messages", content=streamed_body, headers=headers) as stream:
        assert stream.status_code == 200
        text = stream.read().decode()
    assert "message_stop" in text
    assert anthropic_up.last().raw == as_sent(streamed_body)


def test_count_tokens_goes_up_as_sent_without_max_tokens(
    http: httpx.Client, anthropic_up: AnthropicUpstream
) -> None:
    body = NATIVE_BODY.replace(b'"max_tokens": 32000,', b"")
    counted = http.post(
        "/v1/messages/count_tokens", content=body, headers={"content-type": "application/json"}
    )
    assert counted.status_code == 200, counted.text
    assert counted.json() == {"input_tokens": 42}
    seen = anthropic_up.last("/v1/messages/count_tokens")
    assert seen.raw == as_sent(body) and seen.headers["anthropic-beta"] == BETA


# --- translated: Claude Code's first request -------------------------------------------

FIRST: dict[str, Any] = {
    "model": "demo",
    "max_tokens": 200,
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
    ],
    "messages": [
        {"role": "user", "content": "hello"},
        {"role": "system", "content": "Today is Friday."},
        {"role": "user", "content": [{"type": "text", "text": "what day is it?"}]},
    ],
    "metadata": {"user_id": '{"device_id":"abc","session_id":"s1"}'},
    "context_management": {"edits": []},
    "thinking": {"type": "enabled", "budget_tokens": 2000},
    "tools": [{"name": "Bash", "description": "Run", "input_schema": {"type": "object"}}],
}


def test_claude_codes_first_request_is_translated_and_says_what_it_dropped(
    http: httpx.Client, openai_up: FaultUpstream
) -> None:
    answer = post(http, FIRST)
    assert answer.status_code == 200, answer.text
    assert answer.json()["content"][0]["type"] == "text"
    dropped = "anthropic-beta,context_management,metadata"  # the betas: delivery only
    assert answer.headers["x-shunter-dropped"] == dropped
    sent = openai_up.last().body
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "system", "user"]
    assert sent["messages"][2]["content"] == "Today is Friday."
    assert "user" not in sent and "metadata" not in sent
    assert sent["prompt_cache_key"].startswith("shunter-")
    assert sent["reasoning_effort"] == "low"
    assert sent["max_tokens"] == 200 and "max_completion_tokens" not in sent


def test_what_a_chat_upstream_cannot_take_is_refused_by_name(http: httpx.Client) -> None:
    pdf = {  # chat's file parts carry data or an OpenAI file id, never a URL
        "type": "document",
        "source": {"type": "url", "url": "https://example.com/a.pdf"},
    }
    body = {
        **FIRST,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, pdf]}],
    }
    refused = post(http, body)
    assert refused.status_code == 400
    error = refused.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "messages[0].content[1].type" in error["error"]["message"]
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    refused = post(http, {**FIRST, "tools": [search]})
    assert refused.status_code == 400 and "tools[0].type" in refused.text
    assert "web_search_20250305" in refused.text


def test_a_deployment_that_drops_them_says_so(http: httpx.Client, openai_up: FaultUpstream) -> None:
    pdf = {  # chat's file parts carry data or an OpenAI file id, never a URL
        "type": "document",
        "source": {"type": "url", "url": "https://example.com/a.pdf"},
    }
    search = {"type": "web_search_20250305", "name": "web_search"}
    body = {
        **FIRST,
        "model": "lenient",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, pdf]}],
        "tools": [search, FIRST["tools"][0]],
    }
    answer = post(http, body)
    assert answer.status_code == 200, answer.text
    dropped = answer.headers["x-shunter-dropped"].split(",")
    assert {"document", "server_tools", "metadata"} <= set(dropped)
    sent = openai_up.last().body
    assert [t["function"]["name"] for t in sent["tools"]] == ["Bash"]


def test_an_image_in_a_tool_result_follows_the_tool_message(
    http: httpx.Client, openai_up: FaultUpstream
) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "the screenshot"}, image],
    }
    use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "shot"}}
    body = {
        "model": "demo",
        "max_tokens": 50,
        "tools": FIRST["tools"],
        "messages": [
            {"role": "user", "content": "look"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result, {"type": "text", "text": "what is it?"}]},
        ],
    }
    answer = post(http, body)
    assert answer.status_code == 200, answer.text
    roles = [(m["role"], m.get("content")) for m in openai_up.last().body["messages"]]
    assert roles[2] == ("tool", "the screenshot")
    assert roles[3][0] == "user" and roles[3][1][0]["image_url"]["url"].endswith(PNG)
    assert roles[4] == ("user", "what is it?")


# --- reasoning ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["think", "reason"])
def test_upstream_reasoning_becomes_thinking_whole_and_streamed(
    http: httpx.Client, model: str
) -> None:
    thought = "word0 word1 word2 " if model == "think" else "word0 word1 "
    body = {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    whole = post(http, body).json()
    assert whole["content"][0] == {"type": "thinking", "thinking": thought, "signature": ""}
    assert whole["content"][1]["type"] == "text"
    streamed = events(post(http, {**body, "stream": True}))
    starts = [e["content_block"]["type"] for e in streamed if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [e["delta"] for e in streamed if e["type"] == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == thought
    assert {"type": "signature_delta", "signature": ""} in deltas


# --- output budget and context ------------------------------------------------------------


def test_an_output_budget_goes_up_under_the_deployments_name(
    http: httpx.Client, openai_up: FaultUpstream
) -> None:
    body = {"model": "mct", "max_tokens": 77, "messages": [{"role": "user", "content": "hi"}]}
    assert post(http, body).status_code == 200
    sent = openai_up.last().body
    assert sent["max_completion_tokens"] == 77 and "max_tokens" not in sent


OVERFLOW = re.compile(
    r"^input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+), "
    r"decrease input length or `max_tokens` and try again$"
)


def test_context_overflow_is_worded_as_anthropic_words_it(http: httpx.Client) -> None:
    body = {"model": "small", "max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}]}
    refused = post(http, body)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error"
    found = OVERFLOW.match(error["message"])
    assert found is not None, error["message"]
    prompt, budget, limit = map(int, found.groups())
    assert budget == 32000 and limit == 2000
    retried = post(http, {**body, "max_tokens": limit - prompt})  # as Claude Code retries
    assert retried.status_code == 200, retried.text
    long = {**body, "max_tokens": 10, "messages": [{"role": "user", "content": "x " * 6000}]}
    refused = post(http, long)
    assert refused.status_code == 400
    assert re.match(
        r"^prompt is too long: \d+ tokens > 2000 maximum$", refused.json()["error"]["message"]
    )


def test_an_upstreams_context_refusal_is_worded_the_same(http: httpx.Client) -> None:
    prompt = {"role": "user", "content": "word " * 100}  # past the upstream's 50 tokens
    body = {"model": "tight", "max_tokens": 1000, "messages": [prompt]}
    for _ in range(2):  # the upstream's refusal, then the limit it named, learned
        refused = post(http, body)
        assert refused.status_code == 400
        message = refused.json()["error"]["message"]
        found = OVERFLOW.match(message) or re.match(
            r"^prompt is too long: \d+ tokens > 50", message
        )
        assert found is not None, message


def test_a_deployment_that_clamps_lowers_the_budget_and_says_so(
    http: httpx.Client, openai_up: FaultUpstream
) -> None:
    body = {"model": "clamps", "max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}]}
    answer = post(http, body)
    assert answer.status_code == 200, answer.text
    budget = openai_up.last().body["max_tokens"]
    assert 1900 < budget < 2000
    assert answer.headers["x-shunter-clamped"] == f"max_tokens={budget}"
    fits = post(http, {**body, "max_tokens": 100})
    assert fits.status_code == 200 and "x-shunter-clamped" not in fits.headers
    assert openai_up.last().body["max_tokens"] == 100
