"""Session limits, enforced by the gateway around each request of a session.

Before a request runs, :meth:`SessionGuard.admit` refuses it when its conversation ends
in a loop of identical tool calls (429 ``session_loop_detected``), takes from the
session's RPM/TPM, and holds the request's worst case (the token estimate, and its
dollars at the dearest price the model may run at) against the session's budget and
token cap, atomically with the check, in the shared store: concurrent requests of one
session, on any worker or replica, cannot together pass a cap (429
``session_budget_exceeded``). After it ran, :meth:`SessionGuard.settle` replaces the hold
with what the request really used. A session's limits are the key's own where it has
them, else the config's ``sessions:``.

Only a session with a budget or a token cap keeps books in the store (what it spent, used
and holds; what the status page lists), for ``idle_ttl_s`` after its last request. A session
with rate limits only keeps their counters, which lapse within their minute; one with the
loop guard only keeps nothing until the guard stops it (the stop is recorded, for display);
one without session limits costs the store nothing. So one-off conversations of keys with
no session limits leave nothing behind.

Budgets and token caps fail closed (503 ``budget_unavailable`` while the store is down).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from gateway.admission.keys import KeyInfo, KeySessionLimits
from gateway.admission.limits import Grant, Limiter, RateLimit
from gateway.admission.sessions import SessionId
from gateway.admission.settlements import Settlements
from gateway.config import SessionSettings
from gateway.errors import RateLimitError, ServiceUnavailableError
from gateway.protocol.repeats import ToolRepeat
from gateway.state.base import SessionCaps, SessionUse, StateStore, StateUnavailable

log = structlog.get_logger("shunter.sessions")
SHOWN_CHARS = 24


@dataclass(frozen=True)
class SessionLimits:
    """What one session of a key may use (``None``: no limit)."""

    budget_usd: float | None = None
    max_tokens: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    loop_repeats: int | None = None
    idle_ttl_s: float = 3600.0

    @classmethod
    def of(cls, settings: SessionSettings, key: KeyInfo) -> SessionLimits:
        """The key's own session limits, else the config's."""
        own = key.session or KeySessionLimits()
        repeats = own.loop_repeats or settings.loop_guard.repeats
        return cls(
            budget_usd=own.budget_usd if own.budget_usd is not None else settings.budget_usd,
            max_tokens=own.max_tokens or settings.max_tokens,
            rpm=own.rpm or settings.rpm,
            tpm=own.tpm or settings.tpm,
            loop_repeats=repeats,
            idle_ttl_s=settings.idle_ttl_s,
        )

    @property
    def limited(self) -> bool:
        """Whether any session limit is in force (then a new session counts toward the
        key's new sessions: a new id must not escape a stopped session)."""
        return self.capped or any((self.rpm, self.tpm, self.loop_repeats))

    @property
    def capped(self) -> bool:
        """Whether money or tokens are capped (then the books must be kept: fail closed)."""
        return self.budget_usd is not None or self.max_tokens is not None


class SessionStoppedError(RateLimitError):
    """A session's request refused for its session's sake: ``reason`` is ``budget``,
    ``tokens`` or ``loop`` (what the stop counter says)."""

    def __init__(self, message: str, *, reason: str, code: str, should_retry: bool) -> None:
        retry_after = 1.0 if should_retry else None
        super().__init__(message, code=code, should_retry=should_retry, retry_after=retry_after)
        self.reason = reason


@dataclass
class SessionTicket:
    """What one request took from its session."""

    session: SessionId
    limits: SessionLimits
    grant: Grant | None = None
    held: bool = False


class SessionGuard:
    """Session limits over a store; ``settings`` is replaced on reload."""

    def __init__(
        self,
        store: StateStore,
        limiter: Limiter,
        settings: SessionSettings | None = None,
        *,
        hold_ttl_s: float = 900.0,
    ) -> None:
        self.store = store
        self.limiter = limiter
        self.settings = settings or SessionSettings()
        self.hold_ttl_s = hold_ttl_s
        self.settlements = Settlements(give_up_s=hold_ttl_s)

    async def admit(
        self,
        session: SessionId,
        key: KeyInfo,
        cost: tuple[float, int],
        hold_id: str,
        repeat: ToolRepeat | None = None,
    ) -> SessionTicket:
        """Check and take the request's worst ``cost`` (dollars, tokens) from the session
        of ``key``; or raise (429, or 503 when a capped session cannot be checked)."""
        limits = SessionLimits.of(self.settings, key)
        ticket = SessionTicket(session, limits)
        info = _info(session, key)
        loops = limits.loop_repeats
        if repeat is not None and loops is not None and repeat.count >= loops:
            await self._stop(session, "loop", limits, info)
            raise _loop(session, repeat, loops)
        if limits.limited:
            await self._count_new(session, key)
        label = f"session '{shown(session)}' of key '{key.name}'"
        rate = RateLimit(rpm=limits.rpm, tpm=limits.tpm)
        ticket.grant = await self.limiter.reserve(session.scope, label, rate, cost[1])
        if not limits.capped:
            return ticket  # nothing to hold: its books would only take room
        caps = SessionCaps(limits.budget_usd, limits.max_tokens, self.hold_ttl_s, limits.idle_ttl_s)
        try:
            held = await self.store.session_hold(session.scope, hold_id, *cost, caps, info)
        except StateUnavailable as exc:
            await self._give_back(ticket)
            raise _unavailable(session) from exc
        except BaseException:
            await self._give_back(ticket)
            raise
        if not held.allowed:
            await self._give_back(ticket)
            raise _over(session, held.reason, held.use, cost, limits)
        ticket.held = True
        return ticket

    async def _count_new(self, session: SessionId, key: KeyInfo) -> None:
        """Count ``session`` toward its key's new sessions of this window when it is new
        here (not seen within the window); refuse it past ``sessions.new_per_key``."""
        cap, window = self.settings.new_per_key, self.settings.new_window_s
        if cap is None:
            return
        seen = f"session-seen:{{{session.scope}}}"
        now = time.time()
        started = int(now // window) * window
        count_key = f"sessions-new:{{{key.id}}}:{started}"
        try:
            if await self.store.shared_get(seen) is None:
                count = await self.store.shared_incr(count_key, 1, window)
                if count > cap:
                    raise _too_many(session, key, cap, window, started + window - now)
            await self.store.shared_set(seen, "1", window)
        except StateUnavailable:  # the count is a guard, not books: the request goes on
            log.debug("session_count_unavailable", scope=session.scope)

    async def settle(
        self, ticket: SessionTicket, hold_id: str, used_tokens: int, cost_usd: float
    ) -> None:
        """Replace the request's hold with what it used (nothing, when it was given back)."""
        if ticket.grant is not None:
            await self.limiter.reconcile(ticket.grant, used_tokens)
        if not ticket.held:
            return
        ticket.held = False
        scope, idle = ticket.session.scope, ticket.limits.idle_ttl_s

        async def write() -> SessionUse:
            return await self.store.session_settle(scope, hold_id, cost_usd, used_tokens, idle)

        try:
            await write()
        except StateUnavailable:  # the hold lapses by itself; the spend is written later
            self.settlements.keep("session", scope, 0, cost_usd, write)
        else:
            await self.settlements.flush()

    async def release(self, ticket: SessionTicket, hold_id: str) -> None:
        """Give back everything: the request was refused before any upstream work."""
        if ticket.grant is not None:
            await self.limiter.release(ticket.grant)
            ticket.grant = None
        await self.settle(ticket, hold_id, 0, 0.0)

    async def top(self, count: int) -> list[SessionUse]:
        """The biggest spenders among the sessions remembered (none while the store is
        down)."""
        try:
            return await self.store.session_top(count)
        except StateUnavailable:
            return []

    async def _give_back(self, ticket: SessionTicket) -> None:
        if ticket.grant is not None:
            await self.limiter.release(ticket.grant)
            ticket.grant = None

    async def _stop(
        self,
        session: SessionId,
        reason: str,
        limits: SessionLimits,
        info: tuple[tuple[str, str], ...],
    ) -> None:
        try:
            await self.store.session_stop(session.scope, reason, limits.idle_ttl_s, info)
        except StateUnavailable:
            log.debug("session_stop_unrecorded", scope=session.scope, reason=reason)


def shown(session: SessionId) -> str:
    """The session's label, shortened for messages and the status page."""
    label = session.label
    return label if len(label) <= SHOWN_CHARS else label[: SHOWN_CHARS - 3] + "..."


def _info(session: SessionId, key: KeyInfo) -> tuple[tuple[str, str], ...]:
    return (("key_id", key.id), ("key_name", key.name), ("label", session.label))


def _loop(session: SessionId, repeat: ToolRepeat, limit: int) -> SessionStoppedError:
    if ", " in repeat.name:  # a cycle of steps
        what = f"repeated the tool calls '{repeat.name[:128]}' in a cycle {repeat.count} times"
    else:
        what = (
            f"called the tool '{repeat.name[:64]}' with the same arguments "
            f"{repeat.count} times in a row"
        )
    return SessionStoppedError(
        f"Session '{shown(session)}' is stopped: its agent {what} (the loop guard allows "
        f"{limit - 1}). Change the conversation, or start a new session.",
        reason="loop",
        code="session_loop_detected",
        should_retry=False,
    )


def _too_many(
    session: SessionId, key: KeyInfo, cap: int, window_s: int, resets_in_s: float
) -> SessionStoppedError:
    return SessionStoppedError(
        f"Key '{key.name}' has started {cap} sessions in this window of {window_s} s "
        f"(sessions.new_per_key); session '{shown(session)}' is refused until it resets "
        f"in {resets_in_s:.0f} s. Go on in a session already started.",
        reason="sessions",
        code="session_limit_exceeded",
        should_retry=False,
    )


def _over(
    session: SessionId,
    reason: str,
    use: SessionUse,
    cost: tuple[float, int],
    limits: SessionLimits,
) -> SessionStoppedError:
    """Spent: stopped, no retry. Held by the session's requests in flight: retry soon."""
    name = f"Session '{shown(session)}'"
    if reason == "budget":
        assert limits.budget_usd is not None
        spent = use.usd + cost[0] > limits.budget_usd
        what = (
            f"${use.usd:.4f} spent and ${use.held_usd:.4f} held by requests in flight, "
            f"of its budget of ${limits.budget_usd:.2f}; this request may cost ${cost[0]:.4f}"
        )
    else:
        assert limits.max_tokens is not None
        spent = use.tokens + cost[1] > limits.max_tokens
        what = (
            f"{use.tokens} tokens used and {use.held_tokens} held by requests in flight, "
            f"of its limit of {limits.max_tokens} tokens; this request may use {cost[1]}"
        )
    if spent:
        message = f"{name} has reached its limit: {what}. Start a new session to go on."
    else:
        message = f"{name} is at its limit while its requests in flight run: {what}."
    return SessionStoppedError(
        message, reason=reason, code="session_budget_exceeded", should_retry=not spent
    )


def _unavailable(session: SessionId) -> ServiceUnavailableError:
    return ServiceUnavailableError(
        f"The limits of session '{shown(session)}' cannot be checked right now (the state "
        "store is unavailable); requests of capped sessions are refused.",
        code="budget_unavailable",
        retry_after=5,
        should_retry=True,
    )
