"""The wire of ``/v1/messages`` translated for an OpenAI-wire upstream, against a real
`shunter serve`: delivery fields dropped and reported, meaning mapped or refused by name
(the table of :mod:`gateway.apis.anthropic.fields`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.anthropic_upstream import AnthropicUpstream
from tests.fixtures.fault_upstream import FaultUpstream

MASTER = "sk-master-messages-wire"
TOOL = {"name": "Bash", "description": "Run", "input_schema": {"type": "object"}}


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
    folder = tmp_path_factory.mktemp("messages-wire")
    oai = f"backend: openai, base_url: '{openai_up.url}'"
    (folder / "config.yaml").write_text(
        "reliability: {retries: 0}\n"
        "deployments:\n"
        f"  - {{name: claude, backend: anthropic, base_url: '{anthropic_up.url}',"
        " api_key_env: UP_KEY, model: claude-up}\n"
        f"  - {{name: oai, {oai}, model: fake}}\n"
        f"  - {{name: reason, {oai}, model: 'fault:reason:2'}}\n"
        "models:\n"
        "  sonnet: {candidates: [claude]}\n"
        "  demo: {candidates: [oai]}\n"
        "  reason: {candidates: [reason]}\n"
    )
    env = {"SHUNTER_MASTER_KEY": MASTER, "UP_KEY": "sk-upstream"}
    started = start_server(folder / "config.yaml", folder / "server.log", env=env)
    yield started
    stop_server(started)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    headers = {"x-api-key": MASTER, "anthropic-version": "2023-06-01"}
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as client:
        yield client


def post(
    http: httpx.Client, body: dict[str, Any], path: str = "/v1/messages", **headers: str
) -> httpx.Response:
    sent = {"content-type": "application/json", **headers}
    return http.post(path, content=json.dumps(body), headers=sent)


def ask(**fields: Any) -> dict[str, Any]:
    return {
        "model": "demo",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }


def test_delivery_fields_are_dropped_and_reported(
    http: httpx.Client, openai_up: FaultUpstream
) -> None:
    tools = [
        {**TOOL, "eager_input_streaming": True},
        {**TOOL, "name": "Read", "defer_loading": True, "cache_control": {"type": "ephemeral"}},
    ]
    answer = post(
        http,
        ask(tools=tools, service_tier="auto"),
        **{"anthropic-beta": "fine-grained-tool-streaming-2025-05-14"},
    )
    assert answer.status_code == 200, answer.text
    dropped = answer.headers["x-shunter-dropped"].split(",")
    assert dropped == ["anthropic-beta", "defer_loading", "eager_input_streaming", "service_tier"]
    sent = openai_up.last().body
    assert [t["function"]["name"] for t in sent["tools"]] == ["Bash", "Read"]
    assert "eager_input_streaming" not in json.dumps(sent)
    assert "service_tier" not in sent
    assert sent["prompt_cache_key"].startswith("shunter-")  # the cache hint maps


def test_fields_that_change_meaning_are_still_refused_by_name(http: httpx.Client) -> None:
    refused = post(http, ask(container="container_1"))
    assert refused.status_code == 400
    assert refused.json()["error"]["message"].startswith("container:")
    program = {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}
    use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}, "caller": program}
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
    ]
    refused = post(http, ask(messages=turns, tools=[TOOL]))
    assert refused.status_code == 400
    assert "messages[1].content[0].caller" in refused.json()["error"]["message"]


def events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


def test_reasoning_round_trip_whole_and_streamed(
    http: httpx.Client, openai_up: FaultUpstream
) -> None:
    whole = post(http, ask(model="reason"))
    assert whole.status_code == 200, whole.text
    thinking = whole.json()["content"][0]
    assert thinking == {"type": "thinking", "thinking": "word0 word1 ", "signature": ""}
    streamed = post(http, ask(model="reason", stream=True))
    pieces = [
        e["delta"]["thinking"]
        for e in events(streamed)
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "thinking_delta"
    ]
    assert "".join(pieces) == "word0 word1 "
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": whole.json()["content"]},
        {"role": "user", "content": "more"},
    ]
    again = post(http, ask(model="reason", messages=turns))
    assert again.status_code == 200, again.text
    assert again.headers["x-shunter-dropped"] == "thinking"  # said, not silent
    sent = openai_up.last().body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert "reasoning_content" not in sent[1]


def test_unsigned_thinking_never_reaches_anthropic(
    http: httpx.Client, anthropic_up: AnthropicUpstream
) -> None:
    unsigned = {"type": "thinking", "thinking": "made by translation", "signature": ""}
    signed = {"type": "thinking", "thinking": "Anthropic's", "signature": "EqQBCkYIBxgC"}
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [unsigned, {"type": "text", "text": "Hello."}]},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": [signed, {"type": "text", "text": "Hi."}]},
        {"role": "user", "content": "once more"},
        {"role": "assistant", "content": [unsigned]},
        {"role": "user", "content": "last"},
    ]
    answer = post(http, ask(model="sonnet", messages=turns))
    assert answer.status_code == 200, answer.text
    sent = anthropic_up.last().body["messages"]
    assert sent[1]["content"] == [{"type": "text", "text": "Hello."}]
    assert sent[3]["content"][0] == signed  # a signed block goes as it came
    assert [m["content"] for m in sent[4:]] == ["once more", "last"]
    counted = post(http, ask(model="sonnet", messages=turns), "/v1/messages/count_tokens")
    assert counted.status_code == 200, counted.text
    assert "made by translation" not in anthropic_up.last("/v1/messages/count_tokens").raw.decode()


def test_text_blocks_of_a_turn_reach_the_model_as_paragraphs(
    http: httpx.Client, openai_up: FaultUpstream
) -> None:
    document = {"type": "document", "source": {"type": "text", "data": "The end."}}
    question = {"type": "text", "text": "Summarise"}
    cited = [{"type": "text", "text": "Paris is the "}, {"type": "text", "text": "capital."}]
    turns = [
        {"role": "user", "content": [document, question]},
        {"role": "assistant", "content": cited},
        {"role": "user", "content": "more"},
    ]
    answer = post(http, ask(messages=turns))
    assert answer.status_code == 200, answer.text
    sent = openai_up.last().body["messages"]
    assert sent[0]["content"] == "The end.\n\nSummarise"
    assert sent[1]["content"] == "Paris is the capital."  # one answer, cut by citations


def test_translated_messages_have_anthropics_ids(http: httpx.Client) -> None:
    whole = post(http, ask())
    assert whole.json()["id"].startswith("msg_"), whole.json()["id"]
    streamed = post(http, ask(stream=True))
    assert events(streamed)[0]["message"]["id"].startswith("msg_")


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("model", ["demo", "sonnet"])
def test_a_lone_surrogate_is_a_400(http: httpx.Client, path: str, model: str) -> None:
    body = json.dumps(ask(model=model)).replace('"hi"', '"hi \\ud800"')
    refused = http.post(path, content=body, headers={"content-type": "application/json"})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error" and "surrogate" in error["message"]


def test_nulls_and_numbers_anthropic_refuses_are_refused(http: httpx.Client) -> None:
    for body, named in [
        (ask(top_p=None), "top_p"),
        (ask(metadata={"user_id": 12345}), "metadata.user_id"),
    ]:
        refused = post(http, body)
        assert refused.status_code == 400, (body, refused.text)
        assert f"'{named}'" in refused.json()["error"]["message"], refused.text
    assert post(http, ask(metadata={"user_id": None})).status_code == 200


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"$ref": "#"}, "leads back to itself"),
        (
            {
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 9, "maximum": 1}},
            },
            "minimum is greater than maximum",
        ),
        (
            {"type": "object", "properties": {"x": {"$ref": "#/$defs/gone"}}},
            "points at nothing",
        ),
    ],
)
def test_a_tool_schema_no_value_fits_is_refused_by_name(
    http: httpx.Client, schema: dict[str, Any], said: str
) -> None:
    refused = post(http, ask(tools=[{**TOOL, "input_schema": schema}]))
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert "'tools[0].input_schema'" in message and said in message, message
    assert "Traceback" not in message and "object at 0x" not in message
