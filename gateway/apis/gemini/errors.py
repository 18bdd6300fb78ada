"""Errors in Google's shape: ``{"error": {"code", "message", "status"}}``, ``status`` the
canonical name of the HTTP status (400 ``INVALID_ARGUMENT``, 401 ``UNAUTHENTICATED``...),
and for a refusal that names a field, a ``google.rpc.BadRequest`` detail whose field
violation names it as Gemini does (``contents[0].parts[1].inlineData``). An error that
says when to try again (a rate limit, an upstream's quota) carries a ``google.rpc.RetryInfo``
detail with that ``retryDelay``, beside the ``retry-after`` header: Google's clients read
the detail (Gemini CLI waits that long, and gives up past five minutes). A refusal a
Google upstream made, answered at its own status, keeps that upstream's
``google.rpc.QuotaFailure`` and ``google.rpc.BadRequest`` details (which quota ran out: a
daily one tells Gemini CLI to stop retrying; which field was wrong); no other detail of an
upstream's reaches the client."""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import GatewayError

STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
RELAYED = frozenset({_BAD_REQUEST, "type.googleapis.com/google.rpc.QuotaFailure"})
"""The details of a Google upstream's refusal that its client gets too."""


def google_status(status: int) -> str:
    """The canonical status name for an HTTP status."""
    if status in STATUSES:
        return STATUSES[status]
    return "INVALID_ARGUMENT" if status < 500 else "INTERNAL"


def error_object(error: GatewayError, status: int) -> dict[str, Any]:
    """The ``error`` object for ``error`` answered at ``status``."""
    body: dict[str, Any] = {
        "code": status,
        "message": error.message,
        "status": google_status(status),
    }
    details: list[dict[str, Any]] = []
    if error.param:
        violation = {"field": error.param, "description": error.message}
        details.append({"@type": _BAD_REQUEST, "fieldViolations": [violation]})
    if error.upstream_status == status:
        details += upstream_details(error.upstream_body)
    if error.retry_after is not None:
        details.append({"@type": _RETRY_INFO, "retryDelay": f"{max(1, round(error.retry_after))}s"})
    if details:
        body["details"] = details
    return body


def upstream_details(body: str | None) -> list[dict[str, Any]]:
    """The :data:`RELAYED` details of an upstream's error body in Google's shape."""
    try:
        data = json.loads(body or "")
    except ValueError:
        return []
    error = data.get("error") if isinstance(data, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    if not isinstance(details, list):
        return []
    return [d for d in details if isinstance(d, dict) and d.get("@type") in RELAYED]


def gemini_error(error: GatewayError, status: int, request_id: str | None) -> tuple[int, bytes]:
    """An error in Google's shape, at its own status."""
    return status, json.dumps({"error": error_object(error, status)}).encode()
