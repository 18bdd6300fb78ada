"""Responses over a WebSocket (``GET /v1/responses`` upgraded), with the official openai
SDK's WebSocket client against a real `shunter serve` in front of a scripted chat upstream
on loopback: the same events as a streamed POST, continuation on the same socket (also with
``store: false``), ``previous_response_not_found``, ``generate: false``, and a web page's
upgrade refused in open mode."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets.sync.client
from openai import OpenAI
from websockets.exceptions import InvalidStatus

from tests.conftest import Server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn, gateway_over
from tests.gateway.apis.responses.test_schema import event_violations

SCRIPT = [Turn(reasoning="Think.", text="First answer."), Turn(text="Second answer.")]


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(script=list(SCRIPT)) as server:
        yield server


@pytest.fixture(scope="module")
def server(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with gateway_over(upstream, tmp_path_factory.mktemp("responses-socket")) as server:
        yield server


@pytest.fixture
def sdk(server: Server, upstream: ScriptedUpstream) -> Iterator[OpenAI]:
    upstream.bodies.clear()
    with OpenAI(base_url=server.api, api_key="unused", max_retries=0, timeout=60) as client:
        yield client


def _turn(connection: Any, **create: Any) -> list[Any]:
    """The events of one ``response.create``, up to its last (or an error)."""
    connection.response.create(**create)
    events = []
    for event in connection:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "error"):
            return events
    return events


def _messages(body: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(m["role"], m.get("content")) for m in body["messages"]]


def test_a_socket_streams_the_events_and_continues_without_the_store(
    sdk: OpenAI, upstream: ScriptedUpstream
) -> None:
    with sdk.responses.connect() as connection:
        first = _turn(connection, model="agent", input="Hello", store=False)
        kinds = [event.type for event in first]
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == "response.completed"
        assert "response.reasoning_text.delta" in kinds
        # the model that answered (the deployment's upstream model), not the public name
        assert {e.response.model for e in first if hasattr(e, "response")} == {"scripted"}
        for event in first:
            data = event.model_dump(mode="json", exclude_unset=True)
            assert event_violations(event.type, data) == [], data
        done = first[-1].response
        assert done.output_text == "First answer." and done.store is False
        second = _turn(
            connection, model="agent", input="And then?", previous_response_id=done.id, store=False
        )
        assert second[-1].type == "response.completed"
        assert second[-1].response.previous_response_id == done.id
    assert _messages(upstream.bodies[1]) == [
        ("user", "Hello"),
        ("assistant", "First answer."),
        ("user", "And then?"),
    ]


def test_each_turn_is_logged_and_counted_as_a_request(sdk: OpenAI, server: Server) -> None:
    with sdk.responses.connect() as connection:
        _turn(connection, model="agent", input="Hello")
        _turn(connection, model="agent", input="x", previous_response_id="resp_none")
    lines = [json.loads(line) for line in server.log().splitlines() if '"WEBSOCKET"' in line]
    assert [(line["status"], line.get("deployment")) for line in lines[-2:]] == [
        (200, "up"),
        (400, None),
    ]
    metrics = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    assert 'operation="responses"' in metrics


def test_an_unknown_previous_response_is_an_error_and_the_socket_stays_open(
    sdk: OpenAI, upstream: ScriptedUpstream
) -> None:
    with sdk.responses.connect() as connection:
        refused = _turn(connection, model="agent", input="x", previous_response_id="resp_none")
        assert [event.type for event in refused] == ["error"]
        error = refused[0]
        assert error.status == 400 and error.error.code == "previous_response_not_found"
        assert error.error.param == "previous_response_id"
        again = _turn(connection, model="agent", input="Hello")
        assert again[-1].type == "response.completed"
    assert len(upstream.bodies) == 1


def test_an_unstored_response_of_another_socket_is_not_found(sdk: OpenAI) -> None:
    with sdk.responses.connect() as connection:
        done = _turn(connection, model="agent", input="Hello", store=False)[-1].response
    with sdk.responses.connect() as connection:
        refused = _turn(connection, model="agent", input="x", previous_response_id=done.id)
    assert refused[0].type == "error"
    assert refused[0].error.code == "previous_response_not_found"


def test_a_stored_response_continues_on_a_new_socket(
    sdk: OpenAI, upstream: ScriptedUpstream
) -> None:
    with sdk.responses.connect() as connection:
        done = _turn(connection, model="agent", input="Hello")[-1].response
    with sdk.responses.connect() as connection:
        again = _turn(connection, model="agent", input="More", previous_response_id=done.id)
    assert again[-1].type == "response.completed"
    assert _messages(upstream.bodies[1])[:2] == [("user", "Hello"), ("assistant", "First answer.")]


def test_generate_false_prepares_a_turn_without_the_model(
    sdk: OpenAI, upstream: ScriptedUpstream
) -> None:
    with sdk.responses.connect() as connection:
        warm = _turn(
            connection, model="agent", input="Context.", instructions="Be brief.", generate=False
        )
        assert [e.type for e in warm] == [
            "response.created",
            "response.in_progress",
            "response.completed",
        ]
        assert warm[-1].response.output == []
        assert upstream.bodies == []
        _turn(connection, model="agent", input="Go", previous_response_id=warm[-1].response.id)
    assert _messages(upstream.bodies[0]) == [("user", "Context."), ("user", "Go")]


def test_codexs_warm_up_is_answered_with_an_empty_response(
    sdk: OpenAI, upstream: ScriptedUpstream
) -> None:
    with sdk.responses.connect() as connection:
        warm = _turn(connection, model="agent", input=[], generate=False)
        assert warm[-1].type == "response.completed", warm[-1]
        assert warm[-1].response.output == []
        assert upstream.bodies == []  # nothing went upstream
        _turn(connection, model="agent", input="Go", previous_response_id=warm[-1].response.id)
    assert _messages(upstream.bodies[0]) == [("user", "Go")]


def test_a_generate_that_is_no_boolean_is_refused_by_name(server: Server) -> None:
    url = server.api.replace("http://", "ws://") + "/responses"
    create = {"type": "response.create", "model": "agent", "input": "Hi", "generate": "no"}
    with websockets.sync.client.connect(url) as socket:
        socket.send(json.dumps(create))
        said = json.loads(socket.recv(timeout=30))
    assert said["type"] == "error" and said["status"] == 400
    assert said["error"]["param"] == "generate"


def test_an_orphan_tool_output_is_refused_on_the_socket(
    server: Server, upstream: ScriptedUpstream
) -> None:
    url = server.api.replace("http://", "ws://") + "/responses"
    output = {"type": "function_call_output", "call_id": "call_nowhere", "output": "done"}
    create = {"type": "response.create", "model": "agent", "input": [output]}
    before = len(upstream.bodies)
    with websockets.sync.client.connect(url) as socket:
        socket.send(json.dumps(create))
        said = json.loads(socket.recv(timeout=30))
    assert said["type"] == "error" and said["status"] == 400
    assert said["error"]["param"] == "input[0].call_id"
    assert len(upstream.bodies) == before


def test_each_event_names_the_turns_stream_id(server: Server) -> None:
    url = server.api.replace("http://", "ws://") + "/responses"
    create = {"type": "response.create", "model": "agent", "input": "Hi", "stream_id": "lane-1"}
    with websockets.sync.client.connect(url) as socket:
        socket.send(json.dumps(create))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] != "response.completed":
            events.append(json.loads(socket.recv(timeout=30)))
    assert {event["stream_id"] for event in events} == {"lane-1"}


def test_a_web_pages_upgrade_is_refused_in_open_mode(server: Server) -> None:
    url = server.api.replace("http://", "ws://") + "/responses"
    with pytest.raises(InvalidStatus) as refused:
        websockets.sync.client.connect(url, origin="https://evil.example")  # type: ignore[arg-type]
    assert refused.value.response.status_code == 403
