"""The edge every transport passes, tried as an attacker would, against a real
``shunter serve`` with keys on a real redis-server, a scripted chat upstream on loopback and
a real MCP server (the official SDK's): WebSockets bounded per key, by size, nesting and
time; ``/mcp`` under the key's limits, refusing what is not JSON-RPC; Conversations
validated and bounded; every operation's access line; query values never echoed whole."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets.sync.client
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.mcp_servers import HttpToolServer, http_tool_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.redis_server import RedisServer

MASTER = "sk-master-front-door"
MCP_SECRET = "mcp-bearer-7f3c9e1d2b"
SOCKETS_PER_KEY = 2


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(script=[Turn(text="Fine.")]) as server:
        yield server


@pytest.fixture(scope="module")
def tools() -> Iterator[HttpToolServer]:
    with http_tool_server() as server:
        yield server


@pytest.fixture(scope="module")
def server(
    upstream: ScriptedUpstream,
    tools: HttpToolServer,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("front-door")
    config = folder / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: scripted}}\n"
        "models:\n  agent: {candidates: [up]}\n  other: {candidates: [up]}\n"
        f"http: {{max_sockets_per_key: {SOCKETS_PER_KEY}}}\n"
        "responses: {max_bytes: 200000}\n"
        "mcp:\n  servers:\n"
        f"    tools: {{url: '{tools.url}', headers: {{Authorization: 'Bearer {MCP_SECRET}'}}}}\n"
    )
    env = {"SHUNTER_REDIS_URL": redis_server.url, "SHUNTER_MASTER_KEY": MASTER}
    srv = start_server(config, folder / "server.log", env=env, args=["--body-timeout", "3s"])
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def key(redis_server: RedisServer, server: Server) -> str:
    return redis_server.create_key("--name", "front-door")


def _socket_url(server: Server, path: str = "/v1/responses") -> str:
    return server.base_url.replace("http://", "ws://") + path


def _connect(server: Server, key: str, **extra: Any) -> Any:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return websockets.sync.client.connect(
        _socket_url(server), additional_headers=headers, max_size=None, **extra
    )


def _error_of(socket: Any) -> dict[str, Any]:
    message = json.loads(socket.recv(timeout=30))
    assert message["type"] == "error", message
    return message


def _turn_completes(socket: Any) -> None:
    socket.send(json.dumps({"type": "response.create", "model": "agent", "input": "Hi"}))
    while True:
        event = json.loads(socket.recv(timeout=30))
        assert event["type"] != "error", event
        if event["type"] == "response.completed":
            return


# --- WebSockets ---------------------------------------------------------------------------


def test_one_keys_sockets_cannot_take_every_connection(
    server: Server, key: str, redis_server: RedisServer
) -> None:
    held = [_connect(server, key) for _ in range(SOCKETS_PER_KEY)]
    try:
        with pytest.raises(InvalidStatus) as refused:
            _connect(server, key)
        response = refused.value.response
        assert response.status_code == 429
        assert json.loads(response.body)["error"]["code"] == "too_many_sockets"
        # the probes and other keys still get in
        assert httpx.get(f"{server.base_url}/health/liveness", timeout=10).status_code == 200
        other = redis_server.create_key("--name", "front-door-other")
        with _connect(server, other) as socket:
            _turn_completes(socket)
    finally:
        for socket in held:
            socket.close()
    time.sleep(0.2)  # the places come back as the sockets close
    with _connect(server, key) as socket:
        _turn_completes(socket)


def test_a_key_in_the_query_opens_a_socket_and_is_never_logged(server: Server, key: str) -> None:
    url = _socket_url(server) + f"?api_key={key}"
    with websockets.sync.client.connect(url) as socket:
        _turn_completes(socket)
    with pytest.raises(InvalidStatus) as refused:
        websockets.sync.client.connect(_socket_url(server) + "?api_key=sk-wrong-key-value")
    assert refused.value.response.status_code == 401
    log = server.log()
    assert key not in log and "sk-wrong-key-value" not in log


def test_a_message_past_the_body_bound_is_refused_as_over_http(server: Server, key: str) -> None:
    body = {"type": "response.create", "model": "agent", "input": "x" * 10_100_000}
    with _connect(server, key) as socket:
        socket.send(json.dumps(body))
        error = _error_of(socket)
        assert error["status"] == 413 and error["error"]["code"] == "request_too_large"
        _turn_completes(socket)  # the socket stays open and serves


def test_a_nesting_bomb_is_an_error_message_and_the_socket_goes_on(
    server: Server, key: str
) -> None:
    with _connect(server, key) as socket:
        socket.send('{"type": "response.create", "input": ' + "[" * 3000 + "]" * 3000 + "}")
        assert _error_of(socket)["status"] == 400
        _turn_completes(socket)


def test_a_message_trickled_in_fragments_closes_the_socket(server: Server, key: str) -> None:
    """A message whose fragments do not make it whole within the body deadline (3 s
    here) is not held any longer: the socket is closed (1008)."""

    def trickle() -> Iterator[str]:
        for _ in range(20):
            yield "x" * 1000
            time.sleep(0.5)

    with _connect(server, key) as socket:
        sender = threading.Thread(target=lambda: _quietly(socket.send, trickle()), daemon=True)
        sender.start()
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=20)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


def _quietly(send: Any, fragments: Any) -> None:
    with contextlib.suppress(ConnectionClosed):
        send(fragments)


# --- /mcp -----------------------------------------------------------------------------------


def _rpc(server: Server, key: str, message: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/mcp",
        json=message,
        headers={"authorization": f"Bearer {key}", "mcp-protocol-version": "2025-06-18", **headers},
        timeout=30,
    )


def _initialized(server: Server, key: str) -> str:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    answer = _rpc(server, key, hello)
    assert answer.status_code == 200, answer.text
    return answer.headers["mcp-session-id"]


def test_mcp_calls_take_from_the_keys_request_limit(
    server: Server, redis_server: RedisServer
) -> None:
    limited = redis_server.create_key("--name", "front-door-mcp", "--rpm", "3")
    session = _initialized(server, limited)
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    answers = [_rpc(server, limited, listing, **{"mcp-session-id": session}) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    error = answers[-1].json()["error"]
    assert error["data"]["status"] == 429 and "retry-after" in answers[-1].headers


def test_an_mcp_servers_error_never_shows_the_operators_credentials(
    server: Server, key: str
) -> None:
    session = _initialized(server, key)
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
    call["params"] = {"name": "tools__leaky", "arguments": {}}  # type: ignore[assignment]
    answer = _rpc(server, key, call, **{"mcp-session-id": session})
    said = answer.text
    assert answer.status_code == 200 and "authorization" in said
    assert MCP_SECRET not in said and "[redacted]" in said


def test_what_is_not_a_json_rpc_message_is_a_400(server: Server, key: str) -> None:
    for message in (
        {"jsonrpc": "2.0"},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "method": 7},
    ):
        answer = _rpc(server, key, message)
        assert answer.status_code == 400, (message, answer.text)
        assert answer.json()["error"]["code"] == -32600


def test_a_websocket_upgrade_on_mcp_is_refused_by_name(server: Server, key: str) -> None:
    with pytest.raises(InvalidStatus) as refused:
        websockets.sync.client.connect(
            _socket_url(server, "/mcp"), additional_headers={"authorization": f"Bearer {key}"}
        )
    assert refused.value.response.status_code == 400
    assert b"takes no WebSocket" in refused.value.response.body
    assert "Traceback" not in server.log()


# --- headers forwarded upstream -----------------------------------------------------------


def test_a_forwarded_header_is_bounded(server: Server, key: str) -> None:
    answer = httpx.post(
        f"{server.api}/messages",
        json={"model": "agent", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": key, "anthropic-beta": "b" * 60_000},
        timeout=30,
    )
    assert answer.status_code == 400
    body = answer.json()
    assert body["type"] == "error" and "anthropic-beta" in body["error"]["message"]


# --- Conversations ----------------------------------------------------------------------------


def _post(server: Server, key: str, path: str, body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.api}{path}", json=body, headers={"authorization": f"Bearer {key}"}, timeout=30
    )


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "banana"}, "items[0].type"),
        ({"type": "message", "role": "assistant"}, "items[0].content"),
        ({"type": "function_call_output", "output": "x"}, "items[0].call_id"),
    ],
)
def test_conversation_items_are_checked_before_they_are_stored(
    server: Server, key: str, item: dict[str, Any], param: str
) -> None:
    made = _post(server, key, "/conversations", {"items": [item]})
    assert made.status_code == 400 and made.json()["error"]["param"] == param
    conversation = _post(server, key, "/conversations", {}).json()["id"]
    added = _post(server, key, f"/conversations/{conversation}/items", {"items": [item]})
    assert added.status_code == 400 and added.json()["error"]["param"] == param
    # nothing was stored: a response on the conversation still works
    turn = _post(
        server, key, "/responses", {"model": "agent", "input": "Hi", "conversation": conversation}
    )
    assert turn.status_code == 200, turn.text


def test_a_conversation_cannot_grow_past_its_bound(server: Server, key: str) -> None:
    conversation = _post(server, key, "/conversations", {}).json()["id"]
    item = {"type": "message", "role": "user", "content": "y" * 60_000}
    statuses = []
    for _ in range(5):
        added = _post(server, key, f"/conversations/{conversation}/items", {"items": [item]})
        statuses.append(added.status_code)
        if added.status_code != 200:
            error = added.json()["error"]
            assert error["code"] == "conversation_too_large" and error["param"] == "items"
            break
    assert statuses[-1] == 400 and statuses.count(200) >= 2
    listed = httpx.get(
        f"{server.api}/conversations/{conversation}/items",
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert listed.status_code == 200 and len(listed.json()["data"]) == statuses.count(200)


def test_every_operation_writes_its_access_line(server: Server, key: str) -> None:
    conversation = _post(server, key, "/conversations", {}).json()["id"]
    missing = httpx.get(
        f"{server.api}/conversations/{conversation}/items/nope",
        headers={"authorization": f"Bearer {key}", "x-request-id": "req-front-door-404"},
        timeout=30,
    )
    assert missing.status_code == 404
    line = _access_line(server, "req-front-door-404")
    assert line["status"] == 404 and line["key_id"] and "/items/nope" in line["path"]


def test_a_query_value_is_never_echoed_whole(server: Server, key: str) -> None:
    conversation = _post(server, key, "/conversations", {}).json()["id"]
    answer = httpx.get(
        f"{server.api}/conversations/{conversation}/items",
        params={"limit": "9" * 60_000},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "limit" and len(error["message"]) < 400


def test_count_tokens_of_a_large_body_is_counted_and_logged(server: Server, key: str) -> None:
    big = {
        "model": "agent",
        "messages": [{"role": "user", "content": "word " * 600_000}],
    }
    counted = httpx.post(
        f"{server.api}/messages/count_tokens",
        json=big,
        headers={"x-api-key": key, "x-request-id": "req-front-door-count"},
        timeout=60,
    )
    assert counted.status_code == 200, counted.text
    assert counted.json()["input_tokens"] > 500_000
    assert _access_line(server, "req-front-door-count")["model"] == "agent"


def test_a_key_counts_tokens_only_on_the_models_it_may_use(
    redis_server: RedisServer, server: Server
) -> None:
    narrow = redis_server.create_key("--name", "narrow-count", "--models", "agent")
    counted = httpx.post(
        f"{server.api}/messages/count_tokens",
        json={"model": "other", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": narrow},
        timeout=30,
    )
    assert counted.status_code == 403, counted.text
    assert counted.json()["error"]["type"] == "permission_error"
    gemini = httpx.post(
        f"{server.base_url}/v1beta/models/other:countTokens",
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        headers={"x-goog-api-key": narrow},
        timeout=30,
    )
    assert gemini.status_code == 403, gemini.text
    assert gemini.json()["error"]["status"] == "PERMISSION_DENIED"
    allowed = httpx.post(
        f"{server.base_url}/v1beta/models/agent:countTokens",
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        headers={"x-goog-api-key": narrow},
        timeout=30,
    )
    assert allowed.status_code == 200, allowed.text


def _access_line(server: Server, request_id: str) -> dict[str, Any]:
    """The access line of ``request_id`` (written once the answer's last byte went out, so
    it may follow the answer by a moment)."""
    for _ in range(100):
        for text in server.log().splitlines():
            if request_id in text:
                row = _line(text)
                if row.get("event") == "request":
                    return row
        time.sleep(0.05)
    raise AssertionError(f"no access line for {request_id}")


def _line(text: str) -> dict[str, Any]:
    """A structured log line as its fields (``key=value`` pairs, or JSON)."""
    text = text.strip()
    if text.startswith("{"):
        data: dict[str, Any] = json.loads(text)
        return data
    fields: dict[str, Any] = {}
    parts = text.split()
    for part in parts:
        name, sep, value = part.partition("=")
        if sep:
            fields[name] = int(value) if value.isdigit() else value
    if "request" in parts:
        fields.setdefault("event", "request")
    return fields
