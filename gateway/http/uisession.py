"""The status page's sessions: signed cookies, ended on the server at sign-out, and a
sign-in that guesses cannot hammer.

A session cookie is ``<expiry>.<nonce>.<hmac>``: an expiry (Unix seconds), a random nonce,
and their HMAC under a secret derived from the master key. Nothing is stored to sign in;
signing out stores the nonce in the shared state store until the expiry, and a cookie
whose nonce is there is refused on every replica. (While that store is down, a signed-out
cookie that has not expired still opens the page: the page must stay readable during the
outage it reports, and the cookie opens nothing else.)

Failed sign-ins are limited per client address (:data:`SIGN_INS_PER_MINUTE`, counted in
the shared store, or in-process while it is down), a form's or an ``Authorization: Bearer``
header's alike: each attempt takes one from the address's allowance and a right key gives
it back, so the guesser is slowed and the admin signing in from elsewhere never is. The
address is the connection's peer; ``X-Forwarded-For`` names it only when the peer is one of
the configured ``http.trusted_proxies`` (then its right-most address that is not one).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import IPvAnyNetwork

from gateway.admission.limits import Grant, Limiter, LimitExceededError, RateLimit
from gateway.state.base import StateStore, StateUnavailable

SIGN_INS_PER_MINUTE = 10
_MAX_EXPIRY_DIGITS = 12  # Unix seconds for the next 30,000 years
_SIGNED_OUT = "ui:signed-out:"


@dataclass(frozen=True)
class Session:
    """A cookie whose signature holds: when it expires, and the nonce that names it."""

    expires: int
    nonce: str


def session_value(secret: bytes, expires: int, nonce: str | None = None) -> str:
    """A session cookie's value: expiry, nonce, and their HMAC."""
    nonce = os.urandom(12).hex() if nonce is None else nonce
    signed = f"{expires}.{nonce}"
    mac = hmac.new(secret, signed.encode(), hashlib.sha256).hexdigest()
    return f"{signed}.{mac}"


def read_session(value: str | None, secret: bytes, now: float) -> Session | None:
    """The session a cookie value holds, if signed with ``secret`` and not yet expired.
    Any other value (forged, malformed, of any length) is ``None``, never an error."""
    if not value:
        return None
    expires, _, rest = value.partition(".")
    nonce, _, _mac = rest.partition(".")
    if not (0 < len(expires) <= _MAX_EXPIRY_DIGITS and expires.isascii() and expires.isdigit()):
        return None
    if int(expires) <= now or not (nonce.isascii() and nonce.isalnum()):
        return None
    if not hmac.compare_digest(session_value(secret, int(expires), nonce), value):
        return None
    return Session(int(expires), nonce)


async def signed_out(store: StateStore, session: Session) -> bool:
    """Whether this session was ended by a sign-out (on any replica)."""
    try:
        return await store.shared_get(_SIGNED_OUT + session.nonce) is not None
    except StateUnavailable:
        return False


async def sign_out(store: StateStore, session: Session, now: float) -> None:
    """End ``session`` on every replica until it would have expired anyway."""
    # the store down: the cookie is cleared in this browser; elsewhere it lapses at expiry
    with contextlib.suppress(StateUnavailable):
        await store.shared_set(_SIGNED_OUT + session.nonce, "1", session.expires - now)


async def sign_in_attempt(limiter: Limiter, client: str) -> Grant | float:
    """Take one sign-in attempt from ``client``'s allowance: the grant (give it back with
    :func:`signed_in` when the key was right), else the seconds until the next is allowed."""
    scope = "ui-sign-in:" + "".join(c if c.isalnum() or c in ".:" else "_" for c in client)
    try:
        return await limiter.reserve(scope, "sign-in", RateLimit(rpm=SIGN_INS_PER_MINUTE), 0)
    except LimitExceededError as refused:
        return refused.retry_after or 60.0


async def signed_in(limiter: Limiter, attempt: Grant) -> None:
    """The attempt carried the right key: it does not count against its address."""
    await limiter.release(attempt)


def client_address(
    peer: str | None, forwarded_for: str | None, trusted: Sequence[IPvAnyNetwork]
) -> str:
    """The client's address: the peer's, or, when the peer is a trusted proxy, the
    right-most address of ``X-Forwarded-For`` that is not (what a proxy appends can be
    trusted; what the client sent before it cannot)."""
    if peer is None:
        return "unknown"
    if not trusted or not forwarded_for or not _trusted(peer, trusted):
        return peer
    for hop in reversed([h.strip() for h in forwarded_for.split(",")]):
        if not _trusted(hop, trusted):
            return hop or peer
    return peer


def _trusted(address: str, trusted: Sequence[IPvAnyNetwork]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in trusted)
