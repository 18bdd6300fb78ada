"""Admission: the few calls the HTTP layer makes around each request.

::

    key = await admission.authenticate(authorization)    # before the body is read
    session = session_of(key.id, header=..., hint=..., chat=body)   # see sessions.py
    ticket = await admission.admit(model, describe_request(body), key, session)
    # per upstream attempt, inside dispatch (a refusal falls back to the next deployment):
    await admission.admit_deployment(ticket, backend.name)
    ...
    cost = await admission.settle(ticket, usage)      # or release(ticket) if refused
    response.headers.update(admission.headers(ticket))

``authenticate`` says who is calling from the ``Authorization`` header alone (401/403, 503
when keys cannot be checked). ``admit`` checks that the key may use the model (403), the
key's budget (429 ``insufficient_quota``, or 503 when the store is down) and takes one
request plus the token estimate (prompt + max output tokens; prompt only for embeddings)
from the key's RPM/TPM (429 with ``retry-after``). ``admit_deployment``
does the same against the chosen deployment's limits. ``admit`` also holds the request's
worst case from the key's budget (the token estimate at the dearest price among the
model's candidates; for a cascade, the dearest it may run, summed), atomically with the check,
so that concurrent requests cannot all pass one check and overspend together. The prompt in
both is as large as each candidate is expected to count it
(``RequestFacts.upstream_prompt_tokens``: what the deployment reported for earlier requests,
as a ratio to the estimate, and for the session's last), never less than the estimate.
With a session, ``admit`` then applies the session's limits (the loop guard, its RPM/TPM,
its budget and token cap, held the same way: :mod:`~gateway.admission.session_limits`).
``settle`` replaces the token estimate with the actual usage and the hold with the cost
(from the deployment's price); ``release`` gives everything back.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from backends.base import Price, cost_usd, usage_cost
from gateway.admission.keys import KeyInfo, KeyRing, check_model
from gateway.admission.limits import (
    Budgets,
    DeploymentLimitedError,
    Grant,
    Limiter,
    LimitExceededError,
    RateLimit,
    ratelimit_headers,
)
from gateway.admission.session_limits import SessionGuard, SessionTicket
from gateway.admission.sessions import SessionId
from gateway.config import GatewayConfig, ModelRoute
from gateway.protocol import Usage
from gateway.protocol.repeats import ToolRepeat
from gateway.state.base import StateStore
from policies import RequestFacts


@dataclass
class AdmissionTicket:
    """One admitted request: who sent it, what it reserved, where it went."""

    key: KeyInfo
    model: str
    tokens: int
    key_grant: Grant | None = None
    deployment: str | None = None
    deployment_grant: Grant | None = None
    cost_usd: float = 0.0
    settled: bool = False
    attempts: list[str] = field(default_factory=list)
    hold_id: str = field(default_factory=lambda: secrets.token_hex(16))
    held_usd: float = 0.0
    session: SessionTicket | None = None

    @property
    def session_id(self) -> str | None:
        """The id of the request's session (see :func:`~gateway.admission.sessions.session_of`)."""
        return None if self.session is None else self.session.session.id


class Admission:
    """Keys, limits and budgets, behind the calls the HTTP layer makes."""

    def __init__(
        self,
        keys: KeyRing,
        limiter: Limiter,
        budgets: Budgets,
        *,
        prices: Mapping[str, Price | None] | None = None,
        routes: Mapping[str, ModelRoute] | None = None,
        deployment_limits: Mapping[str, RateLimit] | None = None,
        default_output_reserve: int = 1024,
        sessions: SessionGuard | None = None,
    ) -> None:
        self.keys = keys
        self.limiter = limiter
        self.budgets = budgets
        self.prices = dict(prices or {})
        self.routes = dict(routes or {})
        self.deployment_limits = dict(deployment_limits or {})
        self.default_output_reserve = default_output_reserve
        self.sessions = sessions or SessionGuard(budgets.store, limiter)

    @classmethod
    def build(
        cls,
        store: StateStore,
        config: GatewayConfig,
        *,
        environ: Mapping[str, str] | None = None,
        deployment_limits: Mapping[str, RateLimit] | None = None,
    ) -> Admission:
        """Admission over ``store``: prices from ``config``'s deployments, the master key
        from ``SHUNTER_MASTER_KEY`` in ``environ`` (default: the process environment)."""
        limiter = Limiter(store)
        return cls(
            KeyRing.from_env(store, environ),
            limiter,
            Budgets(store),
            prices={d.name: d.price for d in config.deployments},
            routes=config.models,
            deployment_limits=deployment_limits,
            sessions=SessionGuard(store, limiter, config.sessions),
        )

    def apply(
        self, config: GatewayConfig, deployment_limits: Mapping[str, RateLimit] | None = None
    ) -> None:
        """Take prices (and limits, when given) from a reloaded config."""
        self.prices = {d.name: d.price for d in config.deployments}
        self.routes = dict(config.models)
        self.sessions.settings = config.sessions
        if deployment_limits is not None:
            self.deployment_limits = dict(deployment_limits)

    async def authenticate(self, authorization: str | None) -> KeyInfo:
        """Who is calling, from the ``Authorization`` header alone; or raise (401, 403, 503)."""
        return await self.keys.identify(authorization)

    async def admit(
        self,
        model: str,
        facts: RequestFacts,
        key: KeyInfo,
        session: SessionId | None = None,
    ) -> AdmissionTicket:
        """Check that ``key`` may use ``model``, check the budget, take the request (its
        prompt and the output of each choice, as ``facts`` describe it) from the key's
        limits, then from the limits of ``session`` (see
        :mod:`~gateway.admission.session_limits`); or raise."""
        check_model(key, model)
        output = facts.max_tokens
        if output is None:
            output = self.default_output_reserve
        output *= facts.n
        ticket = AdmissionTicket(key, model, self._prompt_tokens(model, facts) + output)
        label = f"key '{key.name}'"
        worst = self.worst_case_usd(model, facts.prompt_tokens, output, facts.server_tools, facts)
        if key.budget_usd is not None:
            await self._hold_budget(ticket, label, worst)
        limit = RateLimit(rpm=key.rpm, tpm=key.tpm)
        try:
            ticket.key_grant = await self.limiter.reserve(key.scope, label, limit, ticket.tokens)
            if session is not None:
                cost = (worst, ticket.tokens)
                repeat = None if facts.tool_repeat is None else ToolRepeat(*facts.tool_repeat)
                ticket.session = await self.sessions.admit(
                    session, key, cost, ticket.hold_id, repeat
                )
        except BaseException:
            if ticket.key_grant is not None:
                await self.limiter.release(ticket.key_grant)
            await self._charge(ticket, 0.0)
            raise
        return ticket

    async def count_request(self, key: KeyInfo) -> None:
        """Take one request from ``key``'s request limit, for a call that is not a
        generation (a stored object, a listing, an MCP call): every call of the API counts;
        nothing is reserved, nothing settles."""
        if key.rpm is not None:
            await self.limiter.reserve(key.scope, f"key '{key.name}'", RateLimit(rpm=key.rpm), 0)

    def worst_case_usd(
        self,
        model: str,
        prompt_tokens: int,
        output_tokens: int,
        server_tools: Mapping[str, int | None] | None = None,
        facts: RequestFacts | None = None,
    ) -> float:
        """The most a request to ``model`` can cost: at its dearest candidate's price (its
        server tools used as often as the request allows, its prompt as large as that
        candidate is expected to count it, as ``facts`` say); for a cascade, at the dearest
        candidates' together, as many as it may run."""
        route = self.routes.get(model)
        if route is None:
            return 0.0

        def prompt(deployment: str) -> int:
            return prompt_tokens if facts is None else facts.prompt_at(deployment)

        costs = sorted(
            (
                cost_usd(self.prices.get(d), prompt(d), output_tokens, server_tools)
                for d in route.candidates
            ),
            reverse=True,
        )
        runs = 1 if route.cascade is None else 1 + route.cascade.max_escalations
        return sum(costs[:runs])

    def _prompt_tokens(self, model: str, facts: RequestFacts) -> int:
        """The prompt tokens to reserve: the most any of ``model``'s candidates is expected
        to count (never less than the estimate)."""
        route = self.routes.get(model)
        if route is None:
            return facts.prompt_tokens
        return max(facts.prompt_at(d) for d in route.candidates)

    async def _hold_budget(self, ticket: AdmissionTicket, label: str, worst: float) -> None:
        key = ticket.key
        assert key.budget_usd is not None
        if worst <= 0:  # nothing to hold: only refuse a budget already used up
            await self.budgets.check(key.scope, label, key.budget_usd, key.budget_window_s)
            return
        budget = (key.budget_usd, key.budget_window_s)
        await self.budgets.hold(key.scope, label, budget, ticket.hold_id, worst)
        ticket.held_usd = worst

    async def admit_deployment(
        self, ticket: AdmissionTicket, deployment: str, limit: RateLimit | None = None
    ) -> None:
        """Take from ``deployment``'s limits (``limit``, else the configured one) before
        its first upstream attempt. A refusal raises
        :class:`~gateway.admission.limits.DeploymentLimitedError` (429): dispatch moves on to
        the next candidate. An earlier candidate's tokens are given back (its request still counts).
        """
        if ticket.deployment_grant is not None:
            await self.limiter.reconcile(ticket.deployment_grant, 0)
            ticket.deployment_grant = None
        ticket.attempts.append(deployment)
        if limit is None:
            limit = self.deployment_limits.get(deployment, RateLimit())
        scope, label = f"deployment:{deployment}", f"deployment '{deployment}'"
        try:
            grant = await self.limiter.reserve(scope, label, limit, ticket.tokens)
        except LimitExceededError as exc:
            raise DeploymentLimitedError(deployment, exc) from exc
        ticket.deployment_grant = grant
        ticket.deployment = deployment

    async def settle(
        self, ticket: AdmissionTicket, usage: Usage | None, cost: float | None = None
    ) -> float:
        """Reconcile reserved tokens with ``usage`` and charge ``cost`` (by default priced
        from the deployment that served it) to the key's budget; returns the cost.

        ``usage=None`` (cache hit, failure, unknown) gives the reserved tokens back and
        charges nothing; the request still counts toward RPM. Settling twice is a no-op.
        """
        if ticket.settled:
            return ticket.cost_usd
        ticket.settled = True
        used = 0 if usage is None else usage.prompt_tokens + usage.completion_tokens
        for grant in (ticket.key_grant, ticket.deployment_grant):
            if grant is not None:
                await self.limiter.reconcile(grant, used)
        if usage is not None and ticket.deployment is not None:
            if cost is None:
                cost = usage_cost(self.prices.get(ticket.deployment), usage)
            ticket.cost_usd = cost
        await self._charge(ticket, ticket.cost_usd)
        if ticket.session is not None:
            await self.sessions.settle(ticket.session, ticket.hold_id, used, ticket.cost_usd)
        return ticket.cost_usd

    async def _charge(self, ticket: AdmissionTicket, usd: float) -> None:
        """Add ``usd`` to the key's spend and drop the ticket's hold, in one step."""
        key = ticket.key
        if key.budget_usd is not None:
            # the hold id also when nothing was held: the store counts each settlement once
            await self.budgets.add(key.scope, key.budget_window_s, usd, ticket.hold_id)

    async def release(self, ticket: AdmissionTicket) -> None:
        """Give back everything (request and tokens): the request was refused before any
        upstream work, e.g. every deployment was rate-limited."""
        if ticket.settled:
            return
        ticket.settled = True
        for grant in (ticket.key_grant, ticket.deployment_grant):
            if grant is not None:
                await self.limiter.release(grant)
        await self._charge(ticket, 0.0)
        if ticket.session is not None:
            await self.sessions.release(ticket.session, ticket.hold_id)

    def headers(self, ticket: AdmissionTicket) -> dict[str, str]:
        """``x-ratelimit-*`` for the response: the tightest of key and deployment limits."""
        states = [
            state
            for grant in (ticket.key_grant, ticket.deployment_grant)
            if grant is not None
            for state in grant.states
        ]
        return ratelimit_headers(states)
