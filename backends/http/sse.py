"""Shared plumbing for backends that call a remote HTTP API.

* :class:`HTTPDeploymentSettings`: where an upstream lives and how long to wait for it;
* :class:`FrameStream` / :func:`iter_frame_blocks`: a streamed body cut into SSE events
  without decoding them (the connection itself is :mod:`backends.http.upstream`);
* :func:`error_for_status` / :func:`error_for_transport`: upstream failures onto
  :mod:`gateway.errors`. This is the one place upstream text becomes an error: the
  client's message has secrets and internal addresses taken out
  (:meth:`~backends.http.redact.Redactor.for_client`); the ``upstream_error`` log line keeps
  the detail with only secrets taken out (:meth:`~backends.http.redact.Redactor.for_log`).
  A rejected credential (401/402/403) and a failed connection tell the client no upstream
  text at all.

Every error raised from here has ``counts_as_failure`` set (declared on ``GatewayError``):
True for connect errors, timeouts, cut streams, bad upstream JSON, 401/402/403/408/429/5xx;
False for 400/404/413/422, which the client's request caused. Errors mapped from a status
also keep ``upstream_status`` and ``upstream_body`` (declared on ``UpstreamError``, set on
the other classes too; read them with :func:`upstream_status`), and the upstream's own
``param`` and ``code`` (scrubbed like its message). A connection reset or closed early, and
a stream that ends before its answer is whole, raise :class:`~gateway.errors.StreamCutError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, NamedTuple

import httpx
import structlog
from pydantic import Field

from backends.base import DeploymentSettings, Timeouts
from backends.http import h1
from backends.http.redact import Redactor
from gateway.errors import (
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
from gateway.protocol import jsonio

USER_AGENT = "shunter/0.1"
# what upstreams say when a prompt does not fit: OpenAI/vLLM ("maximum context length"),
# Anthropic ("prompt is too long"), llama-server ("exceeds the available context size")
_CONTEXT_LENGTH = re.compile(
    r"maximum context length|prompt is too long|exceeds the available context size"
    r"|context_length_exceeded",
    re.IGNORECASE,
)
_BODY_LIMIT = 4096
_FIELD_LIMIT = 100  # an upstream's code/param relayed to the client: names, not prose
log = structlog.get_logger("shunter.upstream")


def first_byte_limit(timeouts: Timeouts) -> float | None:
    """Seconds a stream may wait for its first byte: ``first_token_s`` capped by ``total_s``."""
    return smallest(timeouts.first_token_s, timeouts.total_s)


def smallest(*limits: float | None) -> float | None:
    """The tightest of some time limits (``None``: no limit)."""
    present = [t for t in limits if t is not None]
    return min(present) if present else None


class HTTPDeploymentSettings(DeploymentSettings):
    """Fields shared by deployments behind a remote HTTP API."""

    in_process: ClassVar[bool] = False

    base_url: str = Field(min_length=1)
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    context_length: int | None = Field(default=None, ge=1)
    max_connections: int = Field(default=1024, ge=1)
    health_check: bool = Field(
        default=True, description="probe the upstream in the background while its breaker is open"
    )
    health_path: str | None = Field(
        default=None,
        min_length=1,
        description="what a probe GETs, relative to base_url (default: the API's model list)",
    )


def read_api_key(env_name: str | None) -> str | None:
    """The key held in ``env_name``; ``RuntimeError`` if the variable is named but unset."""
    if env_name is None:
        return None
    key = os.environ.get(env_name)
    if not key:
        raise RuntimeError(f"environment variable {env_name} (api_key_env) is not set")
    return key


# --- errors ---------------------------------------------------------------------------


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


def _client_error(status: int, message: str, code: str | None, param: str | None) -> GatewayError:
    if status == 404:
        cls404 = ModelNotFoundError if code == "model_not_found" else NotFoundError
        return cls404(message, code=code, param=param)
    if status == 413:
        return InvalidRequestError(message, code=code or "request_too_large", param=param)
    if code == "context_length_exceeded" or _CONTEXT_LENGTH.search(message):
        return ContextLengthExceededError(message, param=param)
    return InvalidRequestError(message, code=code, param=param)


def _field(scrub: Redactor, value: str | None) -> str | None:
    """An upstream's ``code``/``param``, scrubbed and bounded like its message."""
    return scrub.for_client(value)[:_FIELD_LIMIT] if value else None


def error_for_status(
    deployment: str,
    status: int,
    body: str,
    headers: Mapping[str, str],
    redactor: Redactor | None = None,
) -> GatewayError:
    """Map an upstream error response onto the gateway's error tree.

    400/404/413/422: the client's fault, passed on, not a deployment failure.
    401/402/403: our credentials or account, 502 with ``x-should-retry: false``.
    408: 504. 429: 429 with retry-after. 529: 503 with retry-after. Other: 502.
    ``redactor`` (the upstream's own) takes secrets and addresses out of what it said.
    """
    scrub = redactor or Redactor()
    body = scrub.for_log(body[:_BODY_LIMIT])
    retry_after = retry_after_seconds(headers)
    said = error_details(body)
    code, param = _field(scrub, said.code), _field(scrub, said.param)
    detail = scrub.for_client(said.message or body[:300] or "(empty body)")
    exc: GatewayError
    counts = True
    if status in (400, 404, 413, 422):
        exc, counts = _client_error(status, detail, code, param), False
    elif status in (401, 402, 403):
        # what it said about our credentials is the operator's business: in the log only
        exc = UpstreamError(
            f"upstream {deployment} rejected the gateway's credentials or account "
            f"(HTTP {status}); check the deployment's API key",
            upstream_status=status,
            upstream_body=body,
            should_retry=False,
        )
    elif status == 408:
        exc = UpstreamTimeoutError(
            f"upstream {deployment} timed out (HTTP 408): {detail}", param=param
        )
    elif status == 429:
        no_retry = code == "insufficient_quota"
        exc = RateLimitError(
            f"upstream {deployment} is rate limited: {detail}",
            code=code or "rate_limit_exceeded",
            param=param,
            retry_after=retry_after,
            should_retry=False if no_retry else None,
        )
    elif status == 529:
        exc = ServiceUnavailableError(
            f"upstream {deployment} is overloaded: {detail}",
            code=code,
            param=param,
            retry_after=retry_after if retry_after is not None else 1.0,
        )
    else:
        exc = UpstreamError(
            f"upstream {deployment} failed (HTTP {status}): {detail}",
            upstream_status=status,
            upstream_body=body,
            code=code,
            param=param,
            retry_after=retry_after,
        )
    emit = log.warning if counts else log.info
    emit("upstream_error", deployment=deployment, status=status, body=body[:1000])
    return annotate(exc, counts_as_failure=counts, upstream_status=status, upstream_body=body)


def error_for_transport(
    deployment: str, exc: Exception, redactor: Redactor | None = None
) -> GatewayError:
    """Map a transport (httpx, :mod:`backends.http.h1`) or deadline failure onto the error
    tree. The client learns the kind of failure; the log also gets its text (which names
    the upstream's address), secrets taken out."""
    out: GatewayError
    kind = type(exc).__name__
    if isinstance(exc, httpx.PoolTimeout | h1.PoolTimeout):
        out = ServiceUnavailableError(f"no free connection to upstream {deployment}")
    elif isinstance(exc, httpx.TimeoutException | TimeoutError):
        out = UpstreamTimeoutError(f"upstream {deployment} timed out ({kind})")
    elif isinstance(exc, httpx.ConnectError | h1.ConnectError):
        out = ServiceUnavailableError(f"cannot connect to upstream {deployment} ({kind})")
    else:  # reset, closed early, not HTTP: whatever was under way was cut
        out = StreamCutError(f"connection to upstream {deployment} failed ({kind})")
    detail = (redactor or Redactor()).for_log(f"{kind}: {exc}")
    log.warning("upstream_unreachable", deployment=deployment, detail=detail[:1000])
    return annotate(out, counts_as_failure=True)


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


# --- streams --------------------------------------------------------------------------


class FrameStream:
    """The SSE frames of one streamed response, in batches: the frames that one read of
    the socket completed (see :func:`iter_frame_blocks`), so that frames which arrived
    together can be written on together. Iterating gives each batch as a list of frames;
    :meth:`blocks` gives it as the bytes it arrived as."""

    def __init__(
        self,
        first: bytes,
        chunks: AsyncIterator[bytes],
        deployment: str,
        deadline: float | None,
        body_read: Callable[[], bool] | None = None,
    ) -> None:
        self._chunks = chunks
        self._blocks = iter_frame_blocks(first, chunks, deployment, deadline)
        self._batches: AsyncGenerator[list[bytes], None] | None = None
        self._body_read = body_read

    def __aiter__(self) -> AsyncIterator[list[bytes]]:
        if self._batches is None:
            self._batches = _batches_of(self._blocks)
        return self._batches

    def blocks(self) -> AsyncIterator[bytes]:
        """Each batch as one piece of bytes: whole events, ``\\n`` line ends, each event
        ending with its blank line (:func:`frames_of` splits one)."""
        return self._blocks

    async def finish(self, limit_s: float = 1.0) -> None:
        """The end marker was seen: read the rest so the connection goes back to the pool
        (nothing to read when ``body_read`` says the body has all arrived); a rest that
        takes longer than ``limit_s`` is dropped with the connection."""
        if self._batches is not None:
            await self._batches.aclose()
        await self._blocks.aclose()
        if self._body_read is None or not self._body_read():
            await drain(self._chunks, limit_s)
        elif isinstance(self._chunks, AsyncGenerator):
            await self._chunks.aclose()


@contextlib.contextmanager
def map_transport_errors(deployment: str, redactor: Redactor | None = None) -> Iterator[None]:
    """httpx failures and stray deadlines onto gateway.errors (see error_for_transport)."""
    try:
        yield
    except (httpx.HTTPError, h1.H1Error, TimeoutError) as exc:
        raise error_for_transport(deployment, exc, redactor) from exc


async def iter_frame_blocks(
    first: bytes, chunks: AsyncIterator[bytes], deployment: str, deadline: float | None
) -> AsyncGenerator[bytes, None]:
    """A byte stream cut after its last complete SSE event, one piece per read that
    completed at least one: the events as they arrived (``\\r\\n`` made ``\\n``), the
    blank line ending each included. Nothing is split per event: frames relayed as they
    came cost a few byte searches per read, however many frames it held.

    ``deadline`` is a loop time; it is checked after every read (reads themselves are
    bounded by the client's read timeout), so a stream never runs far past ``total_s``.
    """
    loop = asyncio.get_running_loop()
    buffer = b""
    chunk = first
    while True:
        buffer = buffer + chunk if buffer else chunk
        if b"\r" in buffer:  # CRLF line ends, possibly split across reads
            buffer = buffer.replace(b"\r\n", b"\n")
        end = buffer.rfind(b"\n\n")
        if end >= 0:
            block, buffer = buffer[: end + 2], buffer[end + 2 :]
            yield block
        if deadline is not None and loop.time() > deadline:
            raise timeout_error(deployment, "stream exceeded its total timeout")
        next_chunk = await anext(chunks, None)
        if next_chunk is None:
            break
        chunk = next_chunk
    if buffer.strip():
        yield buffer.rstrip(b"\n") + b"\n\n"


async def _batches_of(blocks: AsyncIterator[bytes]) -> AsyncGenerator[list[bytes], None]:
    async for block in blocks:
        batch = frames_of(block)
        if batch:
            yield batch


def frames_of(block: bytes) -> list[bytes]:
    """The events of a block from :func:`iter_frame_blocks`, without their blank lines."""
    return [frame for frame in block.split(b"\n\n") if frame]


def data_events(block: bytes) -> int:
    """How many events ``block`` holds if they are all one-line ``data:`` events (OpenAI's
    shape), else 0: two byte counts, whatever the number of events. A 0 only means the
    block is to be looked at event by event."""
    if not block.startswith(b"data:") or not block.endswith(b"\n\n"):
        return 0
    # each blank line but the last is followed by the next event's "data:"; when those
    # blank lines hold every newline of the block, every event is one line
    events = block.count(b"\n\ndata:") + 1
    return events if block.count(b"\n") == 2 * events else 0


def frame_start(block: bytes, *markers: bytes) -> int:
    """Where the first event holding one of ``markers`` starts in ``block`` (a block from
    :func:`iter_frame_blocks`), or -1 when none does."""
    found = [at for marker in markers if (at := block.find(marker)) >= 0]
    return event_start(block, min(found)) if found else -1


def event_start(block: bytes, at: int) -> int:
    """Where the event holding position ``at`` of ``block`` starts."""
    start = block.rfind(b"\n\n", 0, at)
    return start + 2 if start >= 0 else 0


def last_frame(block: bytes) -> bytes:
    """The last event of a block from :func:`iter_frame_blocks`, without its blank line."""
    return block[event_start(block, len(block) - 2) : -2]


def block_of(frames: list[bytes]) -> bytes:
    """Events (without blank lines) as a block: :func:`frames_of` undone."""
    return b"\n\n".join(frames) + b"\n\n" if frames else b""


async def drain(chunks: AsyncIterator[bytes], limit_s: float = 1.0) -> None:
    """Read what is left of a body (after ``[DONE]``) so its connection can be reused.

    Failures and a slow tail are ignored: the answer is complete, and the response's
    close then drops the connection instead of pooling it.
    """
    with contextlib.suppress(httpx.HTTPError, h1.H1Error, TimeoutError):
        async with asyncio.timeout(limit_s):
            async for _ in chunks:
                pass


def data_frame(frame: bytes) -> bytes | None:
    """``frame`` as one ``data: ...`` line (OpenAI's shape, returned as is), or ``None``.

    Frames with ``event:``, comment or several ``data`` lines are rebuilt as one line;
    frames without data (comments, keep-alives) give ``None``.
    """
    if frame.startswith(b"data:") and b"\n" not in frame:
        return frame
    _, data = parse_event(frame)
    return b"data: " + data.encode() if data else None


def parse_event(frame: bytes) -> tuple[str | None, str]:
    """``(event, data)`` of a general SSE frame; comment lines are skipped."""
    event: str | None = None
    data: list[str] = []
    for line in frame.decode("utf-8").split("\n"):
        if not line or line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    return event, "\n".join(data)


def estimate_tokens(chars: int) -> int:
    """Tokens for ``chars`` characters when the upstream reports none: about 4 per token."""
    return (chars + 3) // 4


def encode_json(body: Any) -> bytes:
    """A request body as compact UTF-8 JSON."""
    return jsonio.encode(body)


def load_json(data: bytes | str, deployment: str) -> Any:
    """``json.loads`` that reports bad upstream JSON as an upstream failure."""
    try:
        return json.loads(data)
    except ValueError:
        raise protocol_error(deployment, "sent invalid JSON") from None
