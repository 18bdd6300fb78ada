"""The status page's sessions: signed cookies, ended on the server at sign-out, and a
sign-in that guesses cannot hammer.

A session cookie is ``<expiry>.<nonce>.<hmac>``: an expiry (Unix seconds), a random nonce,
and their HMAC under a secret derived from the master key. Nothing is stored to sign in;
signing out stores the nonce in the shared state store until the expiry, and a cookie
whose nonce is there is refused on every replica. (While that store is down, a signed-out
cookie that has not expired still opens the page: the page must stay readable during the
outage it reports, and the cookie opens nothing else.)

Sign-in attempts are limited per client address (:data:`SIGN_INS_PER_MINUTE`, counted in
the shared store, or in-process while it is down), whatever the key they carry.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
from dataclasses import dataclass

from gateway.admission.limits import Limiter, LimitExceededError, RateLimit
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


async def sign_in_allowed(limiter: Limiter, client: str) -> float | None:
    """Take one sign-in attempt from ``client``'s allowance: ``None`` when allowed, else
    the seconds until the next one is."""
    scope = "ui-sign-in:" + "".join(c if c.isalnum() or c in ".:" else "_" for c in client)
    try:
        await limiter.reserve(scope, "sign-in", RateLimit(rpm=SIGN_INS_PER_MINUTE), 0)
    except LimitExceededError as refused:
        return refused.retry_after or 60.0
    return None
