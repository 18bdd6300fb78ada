"""W3C trace context and the request id: read once from the client's headers, then sent on
to every upstream request.

The gateway never breaks a trace: when it records no spans, the client's ``traceparent``,
``tracestate`` and ``baggage`` reach the upstream unchanged (the upstream's spans then hang
off the client's own); when it records spans, the upstream sees the attempt's client span
as its parent, under the client's trace. ``x-request-id`` goes along in both cases, so an
upstream's logs name the gateway's request.

Reading the headers costs one pass over them; nothing here creates an OpenTelemetry object.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

_VALID_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}\Z")
# version-trace_id-parent_id-flags: the 55 characters of version 00. A later version may
# append fields after a dash; only these four are read (W3C), whatever follows
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TRACEPARENT_LEN = 55
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
MAX_TRACESTATE = 512  # the W3C limit a participant must propagate
MAX_BAGGAGE = 8192  # the W3C baggage header's limit


@dataclass(slots=True)
class Incoming:
    """What the client sent that the gateway carries on: valid values only."""

    request_id: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    baggage: str | None = None

    @property
    def trace_id(self) -> str | None:
        """The client's trace id (32 hex digits), if it sent a valid ``traceparent``."""
        return None if self.traceparent is None else self.traceparent[3:35]

    @property
    def parent_id(self) -> str | None:
        """The client's span id (16 hex digits), if it sent a valid ``traceparent``."""
        return None if self.traceparent is None else self.traceparent[36:52]

    @property
    def sampled(self) -> bool:
        """Whether the client's trace flags ask for recording."""
        return self.traceparent is not None and int(self.traceparent[53:55], 16) & 1 == 1

    def passed_through(self, request_id: str) -> dict[str, str]:
        """The headers an upstream gets when the gateway records nothing: the client's
        context as it came, and the request id."""
        headers = {"x-request-id": request_id}
        if self.traceparent is not None:
            headers["traceparent"] = self.traceparent
            if self.tracestate is not None:
                headers["tracestate"] = self.tracestate
        if self.baggage is not None:
            headers["baggage"] = self.baggage
        return headers


def read_incoming(headers: Iterable[tuple[bytes, bytes]]) -> Incoming:
    """The request id and trace context of a request's headers, in one pass. Invalid values
    are left out: a ``traceparent`` that does not parse starts a new trace, and a
    ``tracestate`` without a valid ``traceparent`` is dropped (as W3C says)."""
    found = Incoming()
    for name, value in headers:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            found.request_id = text if _VALID_ID.match(text) else None
        elif name == b"traceparent":
            found.traceparent = continued_traceparent(value.strip())
        elif name == b"tracestate":
            found.tracestate = _printable(value, MAX_TRACESTATE, found.tracestate)
        elif name == b"baggage":
            found.baggage = _printable(value, MAX_BAGGAGE, found.baggage)
    if found.traceparent is None:
        found.tracestate = None
    return found


def continued_traceparent(value: bytes) -> str | None:
    """The version-00 ``traceparent`` to continue from a client's header, or ``None``.

    A later version is read as W3C says: its first four fields only, the rest neither
    parsed nor kept, and carried on as version 00 with the sampled flag alone; so what
    goes upstream is 55 characters, whatever the client sent."""
    head = value[: _TRACEPARENT_LEN + 1].decode("latin-1")
    match = _TRACEPARENT.match(head)
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    after = head[_TRACEPARENT_LEN:]
    if version == "ff" or (version == "00" and len(value) != _TRACEPARENT_LEN):
        return None
    if after not in ("", "-") or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    if version != "00":
        flags = f"{int(flags, 16) & 1:02x}"
    return f"00-{trace_id}-{span_id}-{flags}"


def valid_traceparent(value: str) -> bool:
    """Whether ``value`` is a ``traceparent`` to continue (W3C Trace Context, level 1)."""
    return continued_traceparent(value.encode("latin-1", "replace")) is not None


def traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """The ``traceparent`` that names one span as the parent of what follows."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def new_request_id() -> str:
    """A fresh request id, for a request that brought no usable one."""
    return f"req_{os.urandom(16).hex()}"


def _printable(value: bytes, limit: int, earlier: str | None) -> str | None:
    """A list-valued header (several lines join with commas), if short and printable."""
    text = value.decode("latin-1").strip()
    if earlier is not None:
        text = f"{earlier},{text}"
    if len(text) > limit or not (text.isascii() and text.isprintable()):
        return None
    return text or None
