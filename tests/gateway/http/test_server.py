"""What ``shunter serve``'s server settles with a client below the app: a WebSocket that
offers permessage-deflate (as most clients do) is answered without it, and works."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import websockets.sync.client

from tests.conftest import Server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn, gateway_over


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with (
        ScriptedUpstream(script=[Turn(text="Hello.")]) as upstream,
        gateway_over(upstream, tmp_path_factory.mktemp("server-sockets")) as server,
    ):
        yield server


def test_a_socket_is_served_without_per_message_compression(server: Server) -> None:
    url = server.base_url.replace("http://", "ws://") + "/v1/responses"
    with websockets.sync.client.connect(url, compression="deflate") as socket:
        assert socket.response is not None
        assert socket.response.headers.get("Sec-WebSocket-Extensions") is None
        socket.send(json.dumps({"type": "response.create", "model": "agent", "input": "Hi"}))
        kinds = []
        for raw in socket:
            kinds.append(json.loads(raw)["type"])
            if kinds[-1] in ("response.completed", "error"):
                break
    assert kinds[-1] == "response.completed"
