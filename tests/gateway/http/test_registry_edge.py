"""One edge for every operation the registry declares: for each API, operation and
transport, the same refusals (no key, a key past its request rate, a body or message past
the bound, a nesting bomb, a web page's origin in open mode), each in the API's own error
shape, and the same access line. The operations come from the registry itself, so an
operation added without a sample request here fails this test."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import websockets.sync.client
from websockets.exceptions import InvalidStatus

from gateway.admission.keys import KeyRing
from gateway.apis.registry import apis
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.mcp_servers import HttpToolServer, http_tool_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.redis_server import RedisServer

MASTER = "sk-master-registry-edge"
HI = [{"role": "user", "content": "hi"}]
SAMPLES: dict[str, Any] = {
    "chat": {"model": "agent", "messages": HI, "max_tokens": 4},
    "text_completion": {"model": "agent", "prompt": "hi", "max_tokens": 4},
    "embeddings": {"model": "agent", "input": "hi"},
    "models": None,
    "responses": {"model": "agent", "input": "hi", "store": False},
    "responses.input_tokens": {"model": "agent", "input": "hi"},
    "responses.retrieve": None,
    "responses.delete": None,
    "responses.input_items": None,
    "conversations.create": {},
    "conversations.retrieve": None,
    "conversations.update": {"metadata": {"a": "b"}},
    "conversations.delete": None,
    "conversations.items": None,
    "conversations.items.create": {"items": [{"role": "user", "content": "hi"}]},
    "conversations.items.retrieve": None,
    "conversations.items.delete": None,
    "messages": {"model": "agent", "max_tokens": 4, "messages": HI},
    "count_tokens": {"model": "agent", "messages": HI},
    "mcp": {"jsonrpc": "2.0", "id": 1, "method": "ping"},
    "generate_content": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    "gemini:count_tokens": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
}


@dataclass(frozen=True)
class Case:
    api: str
    operation: str
    method: str
    path: str
    body: Any

    @property
    def id(self) -> str:
        return f"{self.api}:{self.method}:{self.path}"


def _cases() -> list[Case]:
    cases = []
    for api in apis():
        for operation in api.operations:
            for method in operation.methods:
                path = operation.path.replace(":str}", "}").replace(":path}", "}")
                while "{" in path:
                    start, end = path.index("{"), path.index("}")
                    value = "agent" if operation.action is not None else "x"
                    path = path[:start] + value + path[end + 1 :]
                if operation.action is not None:
                    path += f":{operation.action}"
                body = SAMPLES.get(f"{api.name}:{operation.name}", SAMPLES.get(operation.name))
                cases.append(Case(api.name, operation.name, method, path, body))
    return cases


CASES = _cases()
SOCKETS = [(api.name, op.path) for api in apis() for op in api.operations if op.socket is not None]


def test_every_operation_has_a_sample_request() -> None:
    missing = {case.operation for case in CASES} - {name.split(":")[-1] for name in SAMPLES}
    assert not missing, f"add a sample request for {sorted(missing)}"


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(script=[Turn(text="Fine.")]) as server:
        yield server


@pytest.fixture(scope="module")
def tools() -> Iterator[HttpToolServer]:
    with http_tool_server() as server:
        yield server


def _config(folder: Any, upstream: ScriptedUpstream, tools: HttpToolServer) -> Any:
    config = folder / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: scripted}}\n"
        "models:\n  agent: {candidates: [up]}\n"
        f"mcp:\n  servers:\n    tools: {{url: '{tools.url}'}}\n"
    )
    return config


@pytest.fixture(scope="module")
def keyed(
    upstream: ScriptedUpstream,
    tools: HttpToolServer,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("registry-keyed")
    env = {"SHUNTER_REDIS_URL": redis_server.url, "SHUNTER_MASTER_KEY": MASTER}
    server = start_server(_config(folder, upstream, tools), folder / "server.log", env=env)
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def open_mode(
    upstream: ScriptedUpstream, tools: HttpToolServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("registry-open")
    server = start_server(_config(folder, upstream, tools), folder / "server.log")
    yield server
    stop_server(server)


def _send(server: Server, case: Case, key: str | None, **extra: Any) -> httpx.Response:
    headers = {"x-request-id": extra.pop("request_id", f"req-{uuid.uuid4().hex[:12]}")}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    if case.api == "mcp":
        headers["mcp-protocol-version"] = "2026-07-28"
    headers.update(extra.pop("headers", {}))
    content = extra.pop("content", None)
    if content is None and case.body is not None and case.method in ("POST", "PUT"):
        content = json.dumps(case.body)
    if content is not None:
        headers.setdefault("content-type", "application/json")
    return httpx.request(
        case.method, f"{server.base_url}{case.path}", content=content, headers=headers, timeout=60
    )


def _shaped(case: Case, answer: httpx.Response) -> str:
    """The refusal's message, read as the API's own clients read it."""
    body = answer.json()
    if case.api == "anthropic":
        assert body["type"] == "error", body
        return str(body["error"]["message"])
    if case.api == "mcp":
        assert body["jsonrpc"] == "2.0" and "code" in body["error"], body
        return str(body["error"]["message"])
    if case.api == "gemini":
        assert body["error"]["code"] == answer.status_code and body["error"]["status"], body
        return str(body["error"]["message"])
    assert set(body["error"]) >= {"message", "type", "param", "code"}, body
    return str(body["error"]["message"])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_no_key_is_refused_in_the_apis_shape(keyed: Server, case: Case) -> None:
    answer = _send(keyed, case, None)
    assert answer.status_code == 401, answer.text
    assert _shaped(case, answer)
    assert answer.headers.get("www-authenticate") == "Bearer"


@pytest.fixture(scope="module")
def one_a_minute(redis_server: RedisServer) -> dict[str, str]:
    """A key allowed one request a minute, per case (and per socket), made at once."""

    async def create() -> dict[str, str]:
        store = RedisStateStore.from_url(redis_server.url, prefix="shunter")
        try:
            ring = KeyRing(store)
            names = [case.id for case in CASES] + [f"socket:{path}" for _, path in SOCKETS]
            return {name: (await ring.create(f"rpm-{name}", rpm=1))[0] for name in names}
        finally:
            await store.aclose()

    return asyncio.run(create())


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_key_past_its_request_rate_is_refused_in_the_apis_shape(
    keyed: Server, one_a_minute: dict[str, str], case: Case
) -> None:
    key = one_a_minute[case.id]
    _send(keyed, case, key)
    answer = _send(keyed, case, key)
    assert answer.status_code == 429, answer.text
    assert _shaped(case, answer) and "retry-after" in answer.headers


BODIES = [c for c in CASES if c.method in ("POST", "PUT")]


@pytest.mark.parametrize("case", BODIES, ids=[c.id for c in BODIES])
def test_a_body_past_the_bound_is_a_413_in_the_apis_shape(keyed: Server, case: Case) -> None:
    answer = _send(keyed, case, MASTER, content=b'{"a": "' + b"x" * 10_500_000 + b'"}')
    assert answer.status_code == 413, answer.text[:300]
    assert _shaped(case, answer)


@pytest.mark.parametrize("case", BODIES, ids=[c.id for c in BODIES])
def test_a_nesting_bomb_is_a_400_in_the_apis_shape(keyed: Server, case: Case) -> None:
    bomb = b'{"model": "agent", "a": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    answer = _send(keyed, case, MASTER, content=bomb)
    assert answer.status_code == 400, answer.text[:300]
    assert _shaped(case, answer)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_web_pages_origin_is_refused_in_open_mode(open_mode: Server, case: Case) -> None:
    answer = _send(open_mode, case, None, headers={"origin": "https://evil.example"})
    assert answer.status_code == 403, answer.text
    assert _shaped(case, answer)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_operation_writes_the_same_access_line(keyed: Server, case: Case) -> None:
    request_id = f"req-line-{uuid.uuid4().hex[:10]}"
    answer = _send(keyed, case, MASTER, request_id=request_id)
    row = _access_line(keyed, request_id)
    fields = json.loads(row)
    assert fields["status"] == answer.status_code and fields["key_id"]
    assert fields["path"] == case.path and fields["method"] == case.method


def _access_line(server: Server, request_id: str) -> str:
    """The access line of ``request_id`` (written once the answer's last byte went out, so
    it may follow the answer by a moment)."""
    for _ in range(100):
        for line in server.log().splitlines():
            if request_id in line and '"request"' in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no access line for {request_id}")


# --- the same refusals over a WebSocket ----------------------------------------------------


def _ws(server: Server, path: str, key: str | None, **headers: str) -> Any:
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    url = server.base_url.replace("http://", "ws://") + path
    return websockets.sync.client.connect(url, additional_headers=headers, max_size=None)


def _error(socket: Any) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(socket.recv(timeout=60))
    assert message["type"] == "error", message
    return message


@pytest.mark.parametrize(("api", "path"), SOCKETS)
def test_a_socket_gets_the_same_refusals(
    keyed: Server, open_mode: Server, one_a_minute: dict[str, str], api: str, path: str
) -> None:
    with pytest.raises(InvalidStatus) as nobody:
        _ws(keyed, path, None)
    assert nobody.value.response.status_code == 401
    with pytest.raises(InvalidStatus) as page:
        _ws(open_mode, path, None, origin="https://evil.example")
    assert page.value.response.status_code == 403
    limited = one_a_minute[f"socket:{path}"]
    create = {"type": "response.create", **SAMPLES["responses"]}
    with _ws(keyed, path, limited) as socket:
        socket.send(json.dumps(create))
        while json.loads(socket.recv(timeout=60))["type"] != "response.completed":
            pass
        socket.send(json.dumps(create))
        assert _error(socket)["status"] == 429
    with _ws(keyed, path, MASTER) as socket:
        socket.send('{"type": "response.create", "a": ' + "[" * 5000 + "]" * 5000 + "}")
        assert _error(socket)["status"] == 400
        socket.send(json.dumps({**create, "input": "x" * 10_500_000}))
        assert _error(socket)["status"] == 413
