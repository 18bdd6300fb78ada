"""What the server's connection protocol leaves of the requests it served: nothing that only
the garbage collector frees (the server runs it rarely). A real uvicorn server with
:class:`~gateway.http.edge.EdgeProtocol` on loopback, a real client, the collector off."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.http.edge import EdgeConfig, EdgeLimits
from tests.conftest import free_port
from tests.fixtures.collector import alive, collector_off

REQUESTS = 50


async def echo_length(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the whole body, answers with its length."""
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(size).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def server() -> Iterator[str]:
    port = free_port()
    config = EdgeConfig(
        echo_length, EdgeLimits(), host="127.0.0.1", port=port, lifespan="off", log_config=None
    )
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    while not running.started and thread.is_alive():
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    running.should_exit = True
    thread.join(10)


def test_requests_with_a_body_leave_no_cycle_behind(server: str) -> None:
    with collector_off(), httpx.Client() as client:  # one keep-alive connection
        for n in range(REQUESTS):
            response = client.post(f"{server}/v1/x", content=b"x" * n)
            assert response.text == str(n)
        # the connection's current request may still be held by its protocol
        assert alive(RequestResponseCycle) <= 2
