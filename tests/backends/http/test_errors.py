"""Each row of the error tables: an upstream status, or a transport failure, onto the error
tree (the statuses a real upstream sends are also driven end to end in the backends' tests)."""

from __future__ import annotations

import json

import httpx
import pytest

from backends.http import h1
from backends.http.errors import counts_as_failure, error_for_status, error_for_transport
from gateway.errors import (
    ContextLengthExceededError,
    GatewayError,
    RateLimitError,
    ServiceUnavailableError,
    StreamCutError,
    UpstreamError,
    UpstreamTimeoutError,
)


def body(message: str, code: str | None = None) -> str:
    return json.dumps({"error": {"message": message, "type": "x", "code": code}})


@pytest.mark.parametrize(
    ("status", "said", "cls", "client_status", "counts"),
    [
        (408, body("slow"), UpstreamTimeoutError, 504, True),
        (402, body("pay up"), UpstreamError, 502, True),
        (400, body("prompt is too long: 9000 tokens"), ContextLengthExceededError, 400, False),
        (429, body("no credit", "insufficient_quota"), RateLimitError, 429, True),
        (418, "", UpstreamError, 502, True),
    ],
)
def test_a_status_maps_by_its_row(
    status: int, said: str, cls: type[GatewayError], client_status: int, counts: bool
) -> None:
    exc = error_for_status("up", status, said, {})
    assert type(exc) is cls and exc.status_code == client_status
    assert counts_as_failure(exc) is counts and exc.upstream_status == status


def test_rows_keep_what_the_upstream_said_where_the_client_may_see_it() -> None:
    assert "pay up" not in error_for_status("up", 402, body("pay up"), {}).message
    assert error_for_status("up", 402, body("pay up"), {}).should_retry is False
    quota = error_for_status("up", 429, body("no credit", "insufficient_quota"), {})
    assert quota.should_retry is False and quota.code == "insufficient_quota"
    assert "(empty body)" in error_for_status("up", 418, "", {}).message


@pytest.mark.parametrize(
    ("failure", "cls", "told"),
    [
        (httpx.PoolTimeout("busy"), ServiceUnavailableError, "no free connection to upstream up"),
        (h1.PoolTimeout("busy"), ServiceUnavailableError, "no free connection to upstream up"),
        (httpx.ReadTimeout("slow"), UpstreamTimeoutError, "upstream up timed out (ReadTimeout)"),
        (TimeoutError(), UpstreamTimeoutError, "upstream up timed out (TimeoutError)"),
        (h1.ConnectError("no"), ServiceUnavailableError, "cannot connect to upstream up"),
        (httpx.ConnectError("no"), ServiceUnavailableError, "cannot connect to upstream up"),
        (httpx.RemoteProtocolError("cut"), StreamCutError, "connection to upstream up failed"),
        (h1.H1Error("reset"), StreamCutError, "connection to upstream up failed (H1Error)"),
    ],
)
def test_a_transport_failure_maps_by_its_most_specific_row(
    failure: Exception, cls: type[GatewayError], told: str
) -> None:
    exc = error_for_transport("up", failure)
    assert type(exc) is cls and exc.message.startswith(told)
    assert counts_as_failure(exc)
