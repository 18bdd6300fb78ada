"""The gateway's error tree, rendered to OpenAI's error JSON by one handler.

::

    GatewayError (500 server_error)
    ├── InvalidRequestError (400 invalid_request_error)
    │   └── ContextLengthExceededError (400, code context_length_exceeded)
    ├── AuthenticationError (401)
    ├── PermissionDeniedError (403)
    ├── NotFoundError (404)
    │   └── ModelNotFoundError (404, code model_not_found)
    ├── ConflictError (409, the target's state does not allow it: busy, incompatible)
    ├── RateLimitError (429)
    ├── UpstreamError (502, keeps the upstream's status, body and retry-after)
    │   └── StreamCutError (502, the connection or stream was cut before the answer ended)
    ├── ServiceUnavailableError (503)
    └── UpstreamTimeoutError (504)
        └── StalledError (504, no first token within the deployment's first_token_s)

Every error knows its HTTP status, OpenAI ``type`` and ``code``, the request
``param`` it concerns, and whether a client retry can help (``x-should-retry``). A message
is at most :data:`MAX_MESSAGE` characters: one that quotes what a client sent (a model
name of a megabyte) keeps its beginning and end, and says how much was left out.
"""

from __future__ import annotations

from typing import Any, ClassVar

MAX_MESSAGE = 2_000
_KEEP_HEAD, _KEEP_TAIL = 1_200, 600


def bounded_message(message: str) -> str:
    """``message``, or its beginning and end when it is longer than :data:`MAX_MESSAGE`."""
    if len(message) <= MAX_MESSAGE:
        return message
    left_out = len(message) - _KEEP_HEAD - _KEEP_TAIL
    return f"{message[:_KEEP_HEAD]}...({left_out} characters)...{message[-_KEEP_TAIL:]}"


class GatewayError(Exception):
    """Base of every error the gateway reports to a client."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"
    default_code: ClassVar[str | None] = None
    retryable: ClassVar[bool | None] = None
    # does this failure say something about the deployment (breaker, fallback), rather
    # than about the request? 4xx caused by the request never do.
    counts_as_failure: bool = False
    # what an upstream said, when the error maps an upstream answer
    upstream_status: int | None = None
    upstream_body: str | None = None
    # does ``param`` already name the field as the API the client called names it? Set by
    # a translation that refuses what it read, and once a chat path was renamed
    # (gateway.protocol.fieldnames): chat's names are not applied to it (again).
    param_named: bool = False

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        should_retry: bool | None = None,
    ) -> None:
        message = bounded_message(message)
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.retry_after = retry_after
        self.should_retry = should_retry if should_retry is not None else self.retryable

    def to_body(self) -> dict[str, Any]:
        """OpenAI's error object: every key present, ``param`` and ``code`` nullable."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def headers(self) -> dict[str, str]:
        """Headers that tell an OpenAI SDK client whether and when to retry."""
        out: dict[str, str] = {}
        if self.retry_after is not None:
            out["retry-after"] = str(max(1, round(self.retry_after)))
            out["retry-after-ms"] = str(max(1, round(self.retry_after * 1000)))
        if self.should_retry is not None:
            out["x-should-retry"] = "true" if self.should_retry else "false"
        return out


class InvalidRequestError(GatewayError):
    status_code = 400
    error_type = "invalid_request_error"
    retryable = False


class RequestTooLargeError(InvalidRequestError):
    """A body or message past the largest the gateway takes."""

    status_code = 413
    default_code = "request_too_large"


class ContextLengthExceededError(InvalidRequestError):
    """The request does not fit the model's context. Where the gateway measured it,
    the figures (``prompt_tokens``, ``max_tokens``, ``limit``) let each API word it its
    own way."""

    default_code = "context_length_exceeded"
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    limit: int | None = None


class AuthenticationError(GatewayError):
    status_code = 401
    error_type = "invalid_request_error"
    default_code = "invalid_api_key"
    retryable = False


class PermissionDeniedError(GatewayError):
    status_code = 403
    error_type = "permission_error"
    retryable = False


class NotFoundError(GatewayError):
    status_code = 404
    error_type = "invalid_request_error"
    retryable = False


class ModelNotFoundError(NotFoundError):
    default_code = "model_not_found"
    served: tuple[str, ...] = ()
    """The models the gateway serves (the message lists those the caller may use)."""
    listed: bool = False


class ConflictError(GatewayError):
    """The request is well formed but conflicts with the target's state (a sequence in
    use, a KV cache from an incompatible engine); ``code`` says which."""

    status_code = 409
    error_type = "invalid_request_error"
    retryable = False


class RateLimitError(GatewayError):
    status_code = 429
    error_type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class UpstreamError(GatewayError):
    """An upstream answered with an error; keeps what it said for retry decisions."""

    status_code = 502
    error_type = "upstream_error"
    counts_as_failure = True

    def __init__(
        self,
        message: str,
        *,
        upstream_status: int | None = None,
        upstream_body: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.upstream_status = upstream_status
        self.upstream_body = upstream_body


class ServiceUnavailableError(GatewayError):
    status_code = 503
    error_type = "service_unavailable"
    default_code = "overloaded"
    counts_as_failure = True


class UpstreamTimeoutError(GatewayError):
    status_code = 504
    error_type = "timeout"
    default_code = "upstream_timeout"
    counts_as_failure = True


class StreamCutError(UpstreamError):
    """The connection was reset or closed early, or a stream ended before its answer did."""


class StalledError(UpstreamTimeoutError):
    """A deployment sent nothing (no first token) within its ``first_token_s``."""
