"""Hosted ``mcp`` tools on ``/v1/responses``, run by the gateway on the tiny local model
against real MCP servers, as the official OpenAI SDK sees them.

The tiny model writes arbitrary text, so each test forces its first turn to call the tool
(``tool_choice``: the llama.cpp engine's grammar then writes the call); later turns answer
as they will.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.conftest import Server
from tests.fixtures.mcp_servers import HttpToolServer

LOCAL: dict[str, Any] = {
    "type": "mcp",
    "server_label": "local",
    "require_approval": "never",
    "allowed_tools": ["pid", "broken"],
}
PID_CHOICE = {"type": "mcp", "server_label": "local", "name": "pid"}


def _client(gateway: Server, key: str) -> Any:
    """The SDK's client (typed loosely: the tests read what the gateway wrote)."""
    return OpenAI(base_url=gateway.api, api_key=key, max_retries=0, timeout=120)


def _create(gateway: Server, key: str, **fields: Any) -> dict[str, Any]:
    body = {"model": "tiny", "input": "What is the server's pid?", "max_output_tokens": 16}
    answer = httpx.post(
        f"{gateway.api}/responses",
        json={**body, **fields},
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_a_forced_call_runs_and_the_model_answers(gateway: Server, keys: dict[str, str]) -> None:
    client = _client(gateway, keys["full"])
    response = client.responses.create(
        model="tiny",
        input="What is the server's pid?",
        max_output_tokens=16,
        tools=[LOCAL],
        tool_choice=PID_CHOICE,
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["mcp_list_tools", "mcp_call", "message"]
    listing, call = response.output[0], response.output[1]
    assert listing.type == "mcp_list_tools" and listing.server_label == "local"
    assert sorted(t.name for t in listing.tools) == ["broken", "pid"]  # allowed_tools
    assert call.type == "mcp_call" and call.name == "pid" and call.server_label == "local"
    assert call.output is not None and call.output.isdigit() and call.error is None
    assert response.usage is not None
    # two model calls: each read the whole prompt, so the sum is more than one prompt
    assert response.usage.input_tokens > 2 * 100


def test_streamed_events_interleave_the_call_with_the_text(
    gateway: Server, keys: dict[str, str]
) -> None:
    client = _client(gateway, keys["full"])
    stream = client.responses.create(
        model="tiny",
        input="What is the server's pid?",
        max_output_tokens=16,
        tools=[LOCAL],
        tool_choice=PID_CHOICE,
        stream=True,
    )
    events = list(stream)
    kinds = [e.type for e in events]
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events)))
    order = [
        "response.created",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.output_text.delta",
        "response.completed" if kinds[-1] == "response.completed" else "response.incomplete",
    ]
    positions = [kinds.index(kind) for kind in order]
    assert positions == sorted(positions), kinds
    assert kinds.count("response.completed") + kinds.count("response.incomplete") == 1
    final = events[-1].response
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    call = final.output[1]
    assert call.type == "mcp_call" and call.output is not None and call.output.isdigit()
    done = [e for e in events if e.type == "response.output_item.done"]
    assert [e.item.type for e in done] == ["mcp_list_tools", "mcp_call", "message"]


def test_a_later_turn_reuses_the_listing(gateway: Server, keys: dict[str, str]) -> None:
    first = _create(gateway, keys["full"], tools=[LOCAL], tool_choice=PID_CHOICE)
    later = _create(
        gateway,
        keys["full"],
        input="And again?",
        previous_response_id=first["id"],
        tools=[LOCAL],
        tool_choice=PID_CHOICE,
    )
    assert [item["type"] for item in later["output"]] == ["mcp_call", "message"]
    assert later["output"][0]["output"] == first["output"][1]["output"]  # the same process


def test_an_approval_round_trip(gateway: Server, keys: dict[str, str]) -> None:
    asking = {**LOCAL, "require_approval": "always"}
    first = _create(gateway, keys["full"], tools=[asking], tool_choice=PID_CHOICE)
    kinds = [item["type"] for item in first["output"]]
    assert kinds == ["mcp_list_tools", "mcp_approval_request"]
    request = first["output"][1]
    assert request["name"] == "pid" and request["server_label"] == "local"
    approval = {"type": "mcp_approval_response", "approval_request_id": request["id"]}
    approved = _create(
        gateway,
        keys["full"],
        input=[{**approval, "approve": True}],
        previous_response_id=first["id"],
        tools=[asking],
    )
    call = approved["output"][0]
    assert call["type"] == "mcp_call" and call["approval_request_id"] == request["id"]
    assert call["output"].isdigit()
    assert approved["output"][-1]["type"] in ("message", "mcp_approval_request")
    declined = _create(
        gateway,
        keys["full"],
        input=[{**approval, "approve": False}],
        previous_response_id=first["id"],
        tools=[asking],
        tool_choice="none",
    )
    assert [item["type"] for item in declined["output"]] == ["message"]


def test_an_unknown_approval_is_refused_by_name(gateway: Server, keys: dict[str, str]) -> None:
    answer = httpx.post(
        f"{gateway.api}/responses",
        json={
            "model": "tiny",
            "input": [
                {"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": True}
            ],
            "tools": [LOCAL],
        },
        headers={"Authorization": f"Bearer {keys['full']}"},
        timeout=60,
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "input[0].approval_request_id"


def test_a_tool_error_is_a_failed_call(gateway: Server, keys: dict[str, str]) -> None:
    choice = {"type": "mcp", "server_label": "local", "name": "broken"}
    response = _create(gateway, keys["full"], tools=[LOCAL], tool_choice=choice)
    call = response["output"][1]
    assert call["type"] == "mcp_call" and call["status"] == "failed"
    assert call["error"]["type"] == "mcp_tool_execution_error"
    assert "broken on purpose" in call["output"]


def test_a_key_without_the_server_is_refused_naming_the_tool(
    gateway: Server, keys: dict[str, str]
) -> None:
    answer = httpx.post(
        f"{gateway.api}/responses",
        json={"model": "tiny", "input": "hi", "tools": [LOCAL]},
        headers={"Authorization": f"Bearer {keys['narrow']}"},
        timeout=60,
    )
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["param"] == "tools[0].server_label" and "local" in error["message"]


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        (
            {"type": "mcp", "server_label": "x", "server_url": "http://127.0.0.1:9/mcp"},
            "tools[0].server_url",
        ),
        ({"type": "mcp", "server_label": "nowhere"}, "tools[0].server_label"),
        (
            {"type": "mcp", "server_label": "local", "require_approval": "sometimes"},
            "tools[0].require_approval",
        ),
    ],
)
def test_servers_a_request_may_not_use_are_refused(
    gateway: Server, keys: dict[str, str], tool: dict[str, Any], param: str
) -> None:
    answer = httpx.post(
        f"{gateway.api}/responses",
        json={"model": "tiny", "input": "hi", "tools": [tool]},
        headers={"Authorization": f"Bearer {keys['full']}"},
        timeout=60,
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


def test_a_dead_server_is_a_failed_listing(gateway: Server, keys: dict[str, str]) -> None:
    client = _client(gateway, keys["full"])
    stream = client.responses.create(
        model="tiny",
        input="hi",
        max_output_tokens=4,
        tools=[{"type": "mcp", "server_label": "gone", "require_approval": "never"}],
        stream=True,
    )
    events = list(stream)
    kinds = [e.type for e in events]
    assert "response.mcp_list_tools.failed" in kinds
    final = events[-1].response
    listing = final.output[0]
    assert listing.type == "mcp_list_tools" and listing.tools == []
    assert "'gone'" in listing.error  # the server is named (it fails within its timeout_s)


def test_a_server_that_fails_to_start_is_named_with_the_cause(
    gateway: Server, keys: dict[str, str]
) -> None:
    crashing = {"type": "mcp", "server_label": "crashing", "require_approval": "never"}
    answer = httpx.post(
        f"{gateway.api}/responses",
        json={
            "model": "tiny",
            "input": "What time is it?",
            "max_output_tokens": 8,
            "tools": [LOCAL, crashing],
            "tool_choice": {"type": "mcp", "server_label": "crashing", "name": "now"},
        },
        headers={"Authorization": f"Bearer {keys['full']}"},
        timeout=120,
    )
    assert answer.status_code == 502, answer.text
    error = answer.json()["error"]
    assert error["message"].startswith("MCP server 'crashing' failed to start: "), error
    assert "ended before the MCP handshake" in error["message"]
    assert error["param"] == "tools[1].server_label"
    # without a forced tool, the listing item carries the same cause
    listing = _create(gateway, keys["full"], tools=[crashing])["output"][0]
    assert listing["type"] == "mcp_list_tools" and listing["tools"] == []
    assert listing["error"].startswith("MCP server 'crashing' failed to start: ")
    assert "cannot open clock.db" in gateway.log()  # the process's own words: the log's


def test_web_search_runs_through_the_configured_stand_in(
    gateway: Server, keys: dict[str, str]
) -> None:
    response = _create(
        gateway,
        keys["full"],
        input="Search for shunter",
        max_output_tokens=48,  # room for the query's 8 characters, token by token
        tools=[{"type": "web_search"}],
        tool_choice={"type": "web_search"},
    )
    call = response["output"][0]
    assert call["type"] == "mcp_call" and call["server_label"] == "web" and call["name"] == "echo"
    assert call["status"] == "completed", call
    assert response["output"][-1]["type"] == "message"


def test_file_search_without_a_stand_in_is_still_dropped(
    gateway: Server, keys: dict[str, str]
) -> None:
    answer = httpx.post(
        f"{gateway.api}/responses",
        json={
            "model": "tiny",
            "input": "hi",
            "max_output_tokens": 2,
            "tools": [{"type": "file_search"}],
        },
        headers={"Authorization": f"Bearer {keys['full']}"},
        timeout=60,
    )
    assert answer.status_code == 200
    assert answer.headers["x-shunter-dropped"] == "tools[0]=file_search"


def test_a_configured_server_may_be_named_by_its_url(
    gateway: Server, keys: dict[str, str], web: HttpToolServer
) -> None:
    tool = {
        "type": "mcp",
        "server_label": "mine",
        "server_url": web.url,
        "require_approval": "never",
    }
    response = _create(
        gateway,
        keys["narrow"],  # granted the server "web" only: this is it
        tools=[tool],
        tool_choice={"type": "mcp", "server_label": "mine", "name": "pid"},
    )
    call = response["output"][1]
    assert call["type"] == "mcp_call" and call["server_label"] == "mine"
    assert call["output"].isdigit()


def test_a_client_function_call_ends_the_loop(gateway: Server, keys: dict[str, str]) -> None:
    lookup = {
        "type": "function",
        "name": "lookup",
        "description": "The client's own tool.",
        "parameters": {"type": "object", "properties": {}},
    }
    response = _create(
        gateway,
        keys["full"],
        tools=[LOCAL, lookup],
        tool_choice={"type": "function", "name": "lookup"},
    )
    kinds = [item["type"] for item in response["output"]]
    assert kinds == ["mcp_list_tools", "function_call"]
    assert response["output"][1]["name"] == "lookup"


def _turn(connection: Any, **create: Any) -> Any:
    """The final response of one ``response.create`` on a WebSocket."""
    connection.response.create(**create)
    for event in connection:
        if event.type in ("response.completed", "response.incomplete", "error"):
            return event
    raise AssertionError("the turn did not end")


def test_a_websocket_turn_reuses_the_listing_without_the_store(
    gateway: Server, keys: dict[str, str]
) -> None:
    turn = {"tools": [LOCAL], "tool_choice": PID_CHOICE, "store": False, "max_output_tokens": 8}
    with _client(gateway, keys["full"]).responses.connect() as connection:
        first = _turn(connection, model="tiny", input="pid?", **turn).response
        later = _turn(
            connection, model="tiny", input="again?", previous_response_id=first.id, **turn
        ).response
    assert [item.type for item in first.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert [item.type for item in later.output] == ["mcp_call", "message"]
