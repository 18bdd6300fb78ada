"""Upstream failures onto :mod:`gateway.errors`, each from one table.

* :func:`error_for_status`: an upstream's error answer, by its HTTP status
  (:data:`_BY_STATUS`: the first row that lists the status builds the error);
* :func:`error_for_transport` / :func:`map_transport_errors`: a failed connection, by the
  class of the transport's exception (:func:`_by_transport`: the first row whose classes
  match, most specific first);
* :func:`timeout_error`, :func:`protocol_error`, :func:`cut_error`, :func:`stalled_error`:
  what the gateway itself finds wrong with an upstream.

This is the one place upstream text becomes an error: the client's message has secrets
and internal addresses taken out (:meth:`~backends.http.redact.Redactor.for_client`); the
``upstream_error`` log line keeps the detail with only secrets taken out
(:meth:`~backends.http.redact.Redactor.for_log`). A rejected credential (401/402/403) and a
failed connection tell the client no upstream text at all.

Every error raised from here has ``counts_as_failure`` set (declared on ``GatewayError``):
True for connect errors, timeouts, cut streams, bad upstream JSON, 401/402/403/408/429/5xx;
False for 400/404/413/422, which the client's request caused. Errors mapped from a status
also keep ``upstream_status`` and ``upstream_body`` (declared on ``UpstreamError``, set on
the other classes too; read them with :func:`upstream_status`), and the upstream's own
``param`` and ``code`` (scrubbed like its message). A connection reset or closed early, and
a stream that ends before its answer is whole, raise :class:`~gateway.errors.StreamCutError`.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, NamedTuple

import structlog

from backends.http import h1
from backends.http.redact import Redactor
from gateway.errors import (
    ConflictError,
    ContextLengthExceededError,
    GatewayError,
    InvalidRequestError,
    ModelNotFoundError,
    NotFoundError,
    RateLimitError,
    ServiceUnavailableError,
    StalledError,
    StreamCutError,
    UpstreamError,
    UpstreamTimeoutError,
)

# what upstreams say when a prompt does not fit: OpenAI/vLLM ("maximum context length"),
# Anthropic ("prompt is too long"), llama-server ("exceeds the available context size"),
# Gemini ("exceeds the maximum number of tokens allowed")
_CONTEXT_LENGTH = re.compile(
    r"maximum context length|prompt is too long|exceeds the available context size"
    r"|context_length_exceeded|exceeds the maximum number of tokens allowed",
    re.IGNORECASE,
)
_BODY_LIMIT = 4096
_FIELD_LIMIT = 100  # an upstream's code/param relayed to the client: names, not prose
log = structlog.get_logger("shunter.upstream")


def annotate(
    exc: GatewayError,
    *,
    counts_as_failure: bool,
    upstream_status: int | None = None,
    upstream_body: str | None = None,
) -> GatewayError:
    """Mark ``exc`` for the breaker and keep what the upstream said (status, body)."""
    exc.counts_as_failure = counts_as_failure
    if upstream_status is not None or upstream_body is not None:
        exc.upstream_status, exc.upstream_body = upstream_status, upstream_body
    return exc


def counts_as_failure(exc: BaseException) -> bool:
    """Whether ``exc`` counts against the deployment (breaker, fallback); see error_for_status."""
    return exc.counts_as_failure if isinstance(exc, GatewayError) else True


def upstream_status(exc: BaseException) -> int | None:
    """The HTTP status the upstream answered with, if there was one."""
    value = getattr(exc, "upstream_status", None)
    return value if isinstance(value, int) else None


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms`` (preferred) or ``retry-after`` (seconds or HTTP date), in seconds."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class ErrorDetails(NamedTuple):
    """What an upstream's error body says, each field ``None`` when absent."""

    message: str | None = None
    code: str | None = None
    type: str | None = None
    param: str | None = None


def error_details(body: str) -> ErrorDetails:
    """The fields of an OpenAI or Anthropic error body, when present."""
    try:
        data = json.loads(body)
    except ValueError:
        return ErrorDetails()
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, str):
        return ErrorDetails(message=err)
    if not isinstance(err, dict):
        return ErrorDetails()
    fields = (err.get(name) for name in ErrorDetails._fields)
    return ErrorDetails(*(value if isinstance(value, str) else None for value in fields))


class GoogleDetails(NamedTuple):
    """What a Google API error's ``details`` say (``google.rpc`` messages)."""

    retry_delay: float | None = None
    """``RetryInfo.retryDelay`` in seconds."""
    reason: str | None = None
    """``ErrorInfo.reason`` (``API_KEY_INVALID``...)."""


_RPC = "type.googleapis.com/google.rpc."
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")
_KEY_REASONS = frozenset(
    {"API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED", "API_KEY_HTTP_REFERRER_BLOCKED"}
)
"""Reasons a Google API gives, with a 400, for a key it will not take: our credentials."""


def google_details(body: str) -> GoogleDetails:
    """The retry delay and reason in a Google API error body's ``error.details``."""
    try:
        data = json.loads(body)
    except ValueError:
        return GoogleDetails()
    err = data.get("error") if isinstance(data, dict) else None
    details = err.get("details") if isinstance(err, dict) else None
    delay: float | None = None
    reason: str | None = None
    for detail in details if isinstance(details, list) else ():
        kind = detail.get("@type") if isinstance(detail, dict) else None
        if kind == f"{_RPC}RetryInfo" and isinstance(detail.get("retryDelay"), str):
            found = _DURATION.match(detail["retryDelay"])
            delay = float(found.group(1)) if found else delay
        elif kind == f"{_RPC}ErrorInfo" and isinstance(detail.get("reason"), str):
            reason = detail["reason"]
    return GoogleDetails(delay, reason)


def _field(scrub: Redactor, value: str | None) -> str | None:
    """An upstream's ``code``/``param``, scrubbed and bounded like its message."""
    return scrub.for_client(value)[:_FIELD_LIMIT] if value else None


@dataclass(frozen=True)
class UpstreamSaid:
    """An upstream's error answer, read and scrubbed: what each row of the table builds on."""

    deployment: str
    status: int
    detail: str
    """Its message, for the client (secrets and addresses out)."""
    body: str
    """Its body, for the log (secrets out)."""
    code: str | None
    param: str | None
    retry_after: float | None


def _client_error(said: UpstreamSaid) -> GatewayError:
    message, code, param = said.detail, said.code, said.param
    if said.status == 404:
        cls404 = ModelNotFoundError if code == "model_not_found" else NotFoundError
        return cls404(message, code=code, param=param)
    if said.status == 413:
        return InvalidRequestError(message, code=code or "request_too_large", param=param)
    if code == "context_length_exceeded" or _CONTEXT_LENGTH.search(message):
        return ContextLengthExceededError(message, param=param)
    return InvalidRequestError(message, code=code, param=param)


def _conflict(said: UpstreamSaid) -> GatewayError:
    return ConflictError(
        said.detail, code=said.code, param=said.param, retry_after=said.retry_after
    )


def _rejected_credentials(said: UpstreamSaid) -> GatewayError:
    # what it said about our credentials is the operator's business: in the log only
    return UpstreamError(
        f"upstream {said.deployment} rejected the gateway's credentials or account "
        f"(HTTP {said.status}); check the deployment's API key",
        upstream_status=said.status,
        upstream_body=said.body,
        should_retry=False,
    )


def _timed_out(said: UpstreamSaid) -> GatewayError:
    return UpstreamTimeoutError(
        f"upstream {said.deployment} timed out (HTTP 408): {said.detail}", param=said.param
    )


def _rate_limited(said: UpstreamSaid) -> GatewayError:
    return RateLimitError(
        f"upstream {said.deployment} is rate limited: {said.detail}",
        code=said.code or "rate_limit_exceeded",
        param=said.param,
        retry_after=said.retry_after,
        should_retry=False if said.code == "insufficient_quota" else None,
    )


def _overloaded(said: UpstreamSaid) -> GatewayError:
    return ServiceUnavailableError(
        f"upstream {said.deployment} is overloaded: {said.detail}",
        code=said.code,
        param=said.param,
        retry_after=said.retry_after if said.retry_after is not None else 1.0,
    )


def _failed(said: UpstreamSaid) -> GatewayError:
    return UpstreamError(
        f"upstream {said.deployment} failed (HTTP {said.status}): {said.detail}",
        upstream_status=said.status,
        upstream_body=said.body,
        code=said.code,
        param=said.param,
        retry_after=said.retry_after,
    )


_BY_STATUS: tuple[tuple[frozenset[int], bool, Callable[[UpstreamSaid], GatewayError]], ...] = (
    # statuses, counts against the deployment, the error
    (frozenset({400, 404, 413, 422}), False, _client_error),
    (frozenset({409}), False, _conflict),
    (frozenset({401, 402, 403}), True, _rejected_credentials),
    (frozenset({408}), True, _timed_out),
    (frozenset({429}), True, _rate_limited),
    (frozenset({529}), True, _overloaded),
)
"""The error each upstream status maps to; a status no row lists is :func:`_failed` (502)."""


def error_for_status(
    deployment: str,
    status: int,
    body: str,
    headers: Mapping[str, str],
    redactor: Redactor | None = None,
) -> GatewayError:
    """Map an upstream error response onto the gateway's error tree (:data:`_BY_STATUS`).

    400/404/413/422: the client's fault, passed on, not a deployment failure.
    409: a conflict with the upstream's state (a KV move it refuses), passed on.
    401/402/403: our credentials or account, 502 with ``x-should-retry: false`` (also
    Google's 400 for a key it will not take, by its ``ErrorInfo.reason``).
    408: 504. 429: 429 with retry-after (the header's, else Google's
    ``RetryInfo.retryDelay``). 529: 503 with retry-after. Other: 502.
    ``redactor`` (the upstream's own) takes secrets and addresses out of what it said.
    """
    scrub = redactor or Redactor()
    body = scrub.for_log(body[:_BODY_LIMIT])
    said = error_details(body)
    google = google_details(body)
    # Google answers a key it will not take with a 400: our credentials all the same
    row = 401 if status == 400 and google.reason in _KEY_REASONS else status
    read = UpstreamSaid(
        deployment=deployment,
        status=status,
        detail=scrub.for_client(said.message or body[:300] or "(empty body)"),
        body=body,
        code=_field(scrub, said.code),
        param=_field(scrub, said.param),
        retry_after=_first(retry_after_seconds(headers), google.retry_delay),
    )
    build: Callable[[UpstreamSaid], GatewayError] = _failed
    counts = True
    for statuses, counted, builder in _BY_STATUS:
        if row in statuses:
            build, counts = builder, counted
            break
    emit = log.warning if counts else log.info
    emit("upstream_error", deployment=deployment, status=status, body=body[:1000])
    exc = build(read)
    return annotate(exc, counts_as_failure=counts, upstream_status=status, upstream_body=body)


def _first(*values: float | None) -> float | None:
    return next((value for value in values if value is not None), None)


_Row = tuple[tuple[type[BaseException], ...], type[GatewayError], str]


def _by_transport() -> tuple[_Row, ...]:
    """The error for each transport failure, most specific first: the transport's
    exceptions, the error, what the client is told ({d}: the upstream, {k}: the exception's
    class). Anything else (a reset, a connection closed early, an answer that is not HTTP)
    cut whatever was under way: :class:`~gateway.errors.StreamCutError`."""
    httpx = _httpx()
    pool, timeout, connect = (
        ((), (), ())
        if httpx is None
        else ((httpx.PoolTimeout,), (httpx.TimeoutException,), (httpx.ConnectError,))
    )
    return (
        ((*pool, h1.PoolTimeout), ServiceUnavailableError, "no free connection to {d}"),
        ((*timeout, TimeoutError), UpstreamTimeoutError, "{d} timed out ({k})"),
        ((*connect, h1.ConnectError), ServiceUnavailableError, "cannot connect to {d} ({k})"),
    )


def _httpx() -> Any:
    # httpx is loaded only by what sends through it (a proxied upstream, a test's
    # transport, the KV wire, the command-line tools), so its errors cannot occur before
    # then; a serving process that needs none of them never pays its 1.5 MB
    return sys.modules.get("httpx")


def transport_failures() -> tuple[type[BaseException], ...]:
    """What a transport raises when the connection fails: :mod:`backends.http.h1`'s
    errors, a deadline's, and httpx's once it is loaded."""
    httpx = _httpx()
    return (
        (h1.H1Error, TimeoutError) if httpx is None else (h1.H1Error, TimeoutError, httpx.HTTPError)
    )


def error_for_transport(
    deployment: str, exc: Exception, redactor: Redactor | None = None
) -> GatewayError:
    """Map a transport (httpx, :mod:`backends.http.h1`) or deadline failure onto the error
    tree (:func:`_by_transport`). The client learns the kind of failure; the log also gets
    its text (which names the upstream's address), secrets taken out."""
    kind = type(exc).__name__
    error: type[GatewayError] = StreamCutError
    message = "connection to {d} failed ({k})"
    for classes, cls, told in _by_transport():
        if isinstance(exc, classes):
            error, message = cls, told
            break
    out = error(message.format(d=f"upstream {deployment}", k=kind))
    detail = (redactor or Redactor()).for_log(f"{kind}: {exc}")
    log.warning("upstream_unreachable", deployment=deployment, detail=detail[:1000])
    return annotate(out, counts_as_failure=True)


@contextlib.contextmanager
def map_transport_errors(deployment: str, redactor: Redactor | None = None) -> Iterator[None]:
    """Transport failures and stray deadlines onto gateway.errors (see error_for_transport)."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, transport_failures()):
            raise
        raise error_for_transport(deployment, exc, redactor) from exc


def timeout_error(deployment: str, what: str) -> GatewayError:
    """A deadline of ours ran out."""
    exc = UpstreamTimeoutError(f"upstream {deployment}: {what}")
    return annotate(exc, counts_as_failure=True)


def protocol_error(deployment: str, what: str) -> GatewayError:
    """The upstream broke the wire protocol (bad JSON, a malformed answer)."""
    return annotate(UpstreamError(f"upstream {deployment}: {what}"), counts_as_failure=True)


def cut_error(deployment: str, what: str) -> GatewayError:
    """A stream ended before its answer was whole."""
    return annotate(StreamCutError(f"upstream {deployment}: {what}"), counts_as_failure=True)


def stalled_error(deployment: str, what: str) -> GatewayError:
    """Nothing arrived before the first-token limit."""
    return annotate(StalledError(f"upstream {deployment}: {what}"), counts_as_failure=True)
