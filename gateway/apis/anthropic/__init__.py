"""Anthropic's Messages API: ``/v1/messages`` and ``/v1/messages/count_tokens``.

A request routed to a deployment whose upstream speaks Messages itself is passed through
as the client sent it; one routed elsewhere is translated to the gateway's chat request
(:mod:`~.translation`) under that deployment's rules, and its answer back
(:mod:`~.answer`, :mod:`~.events`). Errors take Anthropic's shape and statuses; the key
comes in ``x-api-key`` (or ``Authorization: Bearer``).
"""

from __future__ import annotations

import json

from gateway.apis.anthropic.codec import MessagesCodec
from gateway.apis.anthropic.count_tokens import count_tokens
from gateway.apis.contract import Api, KeySources, Operation
from gateway.errors import GatewayError
from gateway.protocol.messages import anthropic_status, error_body, error_message


def anthropic_error(error: GatewayError, status: int, request_id: str | None) -> tuple[int, bytes]:
    """An error in Anthropic's shape, at the status Anthropic would answer with."""
    status = anthropic_status(status)
    return status, json.dumps(error_body(status, error_message(error), request_id)).encode()


def api() -> Api:
    return Api(
        name="anthropic",
        operations=(
            Operation("messages", "/v1/messages", codec=MessagesCodec()),
            Operation("count_tokens", "/v1/messages/count_tokens", handler=count_tokens),
        ),
        errors=anthropic_error,
        keys=KeySources(headers=("authorization", "x-api-key")),
        prefixes=("/v1/messages",),
    )
