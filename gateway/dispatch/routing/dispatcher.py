"""Dispatch: pick deployments for a public model name and run the request on them.

Retries and fallback happen only before anything has been sent to the client: a stream is
"opened" by pulling its first chunk, and only a failure up to that point is retried on the
same deployment or moved to the next candidate (the rules are in
:mod:`gateway.dispatch.failover.rules`). Errors caused by the request itself (4xx) are never
retried; a prompt too long for one deployment moves to a larger one. Each deployment has a
circuit breaker, probed in the background while open (:mod:`gateway.dispatch.health.probing`);
when every candidate's breaker is open the client gets a 503 that says so, with the time
until the first one may be tried again.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from opentelemetry import trace

from backends.base import Backend
from backends.registry import DeploymentConfig
from gateway.config import GatewayConfig, ModelRoute
from gateway.dispatch.cascade.run import Cascade
from gateway.dispatch.failover.attempts import Candidate, nothing_can_serve, within
from gateway.dispatch.failover.rules import (
    Admit,
    Failover,
    InOrder,
    OpenedStream,
    Opening,
    Routing,
    Trail,
)
from gateway.dispatch.health.breakers import CircuitBreaker
from gateway.dispatch.health.fleet import Fleet
from gateway.dispatch.health.learned import ContextLimits
from gateway.dispatch.health.live import Attempt, DeploymentTracker
from gateway.dispatch.health.probing import Prober
from gateway.dispatch.midstream.resume import Resume
from gateway.dispatch.routing.describing import DeploymentDescriber
from gateway.dispatch.routing.hedging import hedged
from gateway.dispatch.routing.moving import KvMoving
from gateway.dispatch.routing.sending import Sent, Started, answer_once, start_once
from gateway.dispatch.routing.served import Routed, ServedStream
from gateway.dispatch.work import Work
from gateway.errors import GatewayError, ModelNotFoundError, StalledError
from gateway.protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest, ModelList
from gateway.protocol.common import Model
from gateway.protocol.frames import Chunks, Deadline, FrameStream, Stream
from gateway.residency.placement import plan_deployments
from gateway.residency.resident import Residency
from gateway.telemetry.tracing import attempt_span, note_decision
from policies import Candidate as PolicyCandidate
from policies import Decision, FitClass, RequestFacts

T = TypeVar("T")
AdmitDeployment = Callable[[str], Awaitable[None]]
"""Takes a deployment's own limits (by its name) before it is tried; raises when they refuse."""


class Gateway:
    """Holds the live config, its backends and what is known of them (:class:`Fleet`);
    routes requests to them."""

    def __init__(
        self,
        config: GatewayConfig,
        backends: dict[str, Backend],
        residency: Residency | None = None,
    ) -> None:
        self.config = config
        self.residency = residency or Residency(config.local_models, config.devices)
        self.ready = False
        self.draining = False
        self.tracer: trace.Tracer = trace.NoOpTracer()
        self.fleet = Fleet(config.reliability, backends)
        self._describe = DeploymentDescriber()
        self._retiring: set[asyncio.Task[None]] = set()
        self.on_reload: list[Callable[[GatewayConfig], None]] = []
        self.config_version = config_version(config)
        self._failover = Failover(config.reliability, self.fleet.context_limits)
        self._prefix_readers: tuple[GatewayConfig, frozenset[str]] | None = None
        self.kv_moving = KvMoving(self.fleet)

    @classmethod
    def from_config(cls, config: GatewayConfig) -> Gateway:
        residency = Residency(config.local_models, config.devices)
        return cls(config, {d.name: residency.create(d) for d in config.deployments}, residency)

    # --- the fleet's tables, as routing and the status pages read them --------------------

    @property
    def backends(self) -> dict[str, Backend]:
        return self.fleet.backends

    @property
    def breakers(self) -> dict[str, CircuitBreaker]:
        return self.fleet.breakers

    @property
    def trackers(self) -> dict[str, DeploymentTracker]:
        return self.fleet.trackers

    @property
    def context_limits(self) -> ContextLimits:
        return self.fleet.context_limits

    @property
    def fits(self) -> dict[str, FitClass]:
        return self.fleet.fits

    @fits.setter
    def fits(self, fits: dict[str, FitClass]) -> None:
        self.fleet.fits = fits

    @property
    def prober(self) -> Prober:
        return self.fleet.prober

    def deployment_health(self, name: str) -> dict[str, object]:
        """A deployment's breaker and learned context, for readiness and ``shunter route``."""
        return self.fleet.health(name)

    def adopt(self, deployments: Mapping[str, Any]) -> None:
        """See :meth:`Fleet.adopt`."""
        self.fleet.adopt(deployments)

    # --- lifecycle and reload ----------------------------------------------------------------

    async def apply(self, config: GatewayConfig, drain_timeout_s: float = 60.0) -> None:
        """Switch to a new config for new requests; in-flight ones finish where they are.

        Deployments whose settings did not change keep their backend (and its loaded model
        and breaker). New or changed ones are started first: if one fails to start, the
        reload is abandoned and the current config keeps serving.
        """
        keep = {
            d.name: self.backends[d.name]
            for d in config.deployments
            if d.name in self.backends and _same(self.config, d)
        }
        fresh = {d.name: self.residency.create(d) for d in config.deployments if d.name not in keep}
        self.residency.configure(config.local_models, config.devices)
        try:
            await asyncio.gather(*(b.start() for b in fresh.values()))
        except BaseException:
            await asyncio.gather(*(b.aclose() for b in fresh.values()), return_exceptions=True)
            self.residency.configure(self.config.local_models, self.config.devices)
            raise
        retired = [b for name, b in self.backends.items() if keep.get(name) is not b]
        self.fleet.reconfigure(config.reliability, keep, fresh)
        self._failover = Failover(config.reliability, self.fleet.context_limits)
        fits = await _memory_fits(config)
        await asyncio.to_thread(self._describe.learn_sizes, config.deployments)
        self.config, self.fleet.backends, self.fleet.fits = config, {**keep, **fresh}, fits
        self.residency.start()
        await self.prober.retune(config.reliability.probe_interval_s)
        self.config_version = config_version(config)
        for hook in self.on_reload:
            hook(config)
        for backend in retired:
            self._retire(backend, drain_timeout_s)

    def _retire(self, backend: Backend, drain_timeout_s: float) -> None:
        async def close_when_idle() -> None:
            deadline = time.monotonic() + drain_timeout_s
            while backend.stats().in_flight and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await backend.aclose()

        task = asyncio.get_running_loop().create_task(close_when_idle())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def start(self) -> None:
        await asyncio.gather(*(b.start() for b in self.backends.values()))
        self.fits = await _memory_fits(self.config)
        await asyncio.to_thread(self._describe.learn_sizes, self.config.deployments)
        self.residency.start()
        self.prober.start()
        self.kv_moving.start()
        self.ready = True

    async def aclose(self) -> None:
        self.ready = False
        await self.kv_moving.aclose()
        await self.prober.stop()
        await self.residency.stop()
        await asyncio.gather(*self._retiring, return_exceptions=True)
        await asyncio.gather(*(b.aclose() for b in self.backends.values()))

    def answering_model(self, deployment: str) -> str:
        """What ``model`` says in an answer from ``deployment``: the model its upstream is
        asked for, or, for an engine in this process (whose ``model`` is a file), the
        deployment's name."""
        for settings in self.config.deployments:
            if settings.name == deployment:
                return settings.name if settings.in_process else settings.model
        return deployment

    def model_list(self) -> ModelList:
        return ModelList(data=[Model(id=name) for name in self.config.models])

    def route(self, model: str) -> ModelRoute:
        route = self.config.models.get(model)
        if route is None:
            missing = ModelNotFoundError(
                f"The model '{model}' does not exist or you do not have access to it.",
                param="model",
            )
            missing.served = tuple(self.config.models)
            raise missing
        return route

    def reads_prefixes(self, model: str) -> bool:
        """Whether routing may read the prefix chain of a request for ``model``: a route
        whose policy reads live figures shares one of its deployments (the links sent to a
        deployment count as held there). Else describing a request skips the chain."""
        config, memo = self.config, self._prefix_readers
        if memo is None or memo[0] is not config:
            memo = self._prefix_readers = (config, prefix_readers(config))
        return model in memo[1]

    def decide(self, model: str, request: RequestFacts | None = None) -> Routing:
        """Rank ``model``'s deployments for ``request`` with the route's policy."""
        route = self.route(model)
        facts = request or RequestFacts(prompt_tokens=0)
        pool = self.policy_candidates(model, live=route.policy.reads_live)
        decision = route.policy.route(facts, pool, now=time.monotonic(), explain=False)
        note_decision(decision)
        if decision.chosen is None:
            raise nothing_can_serve(model, facts, pool, decision.reason())
        ranked = decision.ranked if route.fallback else decision.ranked[:1]
        candidates = InOrder(ranked, self._candidate)
        trail = Trail()
        if decision.dropped:
            self._note_open_skipped(route, decision, trail)
        return Routing(
            candidates,
            decision.reason(),
            facts,
            decision.hedge,
            trail,
            route.fallback and route.context_fallback,
            route.retry_after_wait_s,
        )

    def first_choice(self, model: str) -> Backend:
        """The deployment ``model``'s policy ranks first for a request it knows nothing of."""
        return self.decide(model).candidates[0].backend

    def _candidate(self, name: str) -> Candidate:
        return self._describe.candidate(name, self)

    def _note_open_skipped(self, route: ModelRoute, decision: Decision, trail: Trail) -> None:
        """Candidates listed before the chosen one whose open breaker kept them out: the
        request fell back from them (``breaker_open``)."""
        assert decision.chosen is not None
        order = route.candidates
        before = order.index(decision.chosen.name)
        for dropped in decision.dropped:
            name = dropped.name
            if order.index(name) < before and self.breakers[name].state == "open":
                trail.leave(self._candidate(name), "breaker_open", fallback=True)

    def policy_candidates(self, model: str, *, live: bool = True) -> Sequence[PolicyCandidate]:
        """``model``'s deployments as routing sees them now: config, health and (unless
        ``live`` is false: the policy does not read them) live figures."""
        return self._describe.pool(self.route(model).candidates, self, live=live)

    async def answer(self, work: Work) -> Routed[Any]:
        """``work``'s whole answer, with retries and fallback: each attempt sends what the
        work's plan says the deployment is sent."""

        def attempt(backend: Backend) -> Awaitable[Sent]:
            return answer_once(work, backend, self.answering_model(backend.name))

        admit = work.admit if work.admits else None
        routed = await self.call(work.model, attempt, work.operation, admit, work.facts)
        sent: Sent = routed.value
        if sent.usage is not None and sent.usage.prompt_tokens:
            facts = work.facts
            tracker = routed.candidate.tracker
            tracker.learn_prompt(facts.prompt_tokens, sent.usage.prompt_tokens, facts.session_id)
        return replace(routed, value=sent.value, sending=sent.sending, usage=sent.usage)

    def expected_prompts(self, model: str, facts: RequestFacts) -> dict[str, int]:
        """The prompt tokens each of ``model``'s deployments is expected to count for the
        request ``facts`` describe, where that is more than the gateway's estimate (what it
        reported for earlier requests: its learned ratio, the session's last prompt)."""
        route = self.config.models.get(model)
        if route is None:
            return {}
        expected = {}
        for name in route.candidates:
            tracker = self.trackers.get(name)
            if tracker is None:
                continue
            tokens = tracker.expected_prompt(facts.prompt_tokens, facts.session_id)
            if tokens > facts.prompt_tokens:
                expected[name] = tokens
        return expected

    async def open(self, work: Work) -> ServedStream:
        """``work``'s stream, opened (see :meth:`open_stream`): in the work's form, each
        attempt sending what the work's plan says."""

        def start(backend: Backend) -> Started:
            return start_once(work, backend, self.answering_model(backend.name))

        admit = work.admit if work.admits else None
        resumable = None if isinstance(work.routed, EmbeddingRequest) else work.routed
        return await self._open(
            work.model, start, work.operation, admit, work.facts, resumable, work.notes
        )

    async def call(
        self,
        model: str,
        attempt: Callable[[Backend], Awaitable[T]],
        operation: str = "chat",
        admit: AdmitDeployment | None = None,
        request: RequestFacts | None = None,
    ) -> Routed[T]:
        """Run a whole (non-streaming) request, with retries and fallback."""

        async def bounded(candidate: Candidate) -> T:
            limit = candidate.settings.timeouts.total_s
            return await within(limit, attempt(candidate.backend), candidate.backend)

        routing = self.decide(model, request)
        rule = self.config.models[model].cascade
        run = functools.partial(
            self._first_success, operation=operation, admit=_by_name(admit), model=model
        )
        if rule is not None and operation != "embeddings":
            chosen, result, tracked, report = await Cascade(rule, model, routing).call(run, bounded)
            tracked.finish(None)
            reason = routing.trail.route(chosen.settings.name, routing.reason)
            return Routed(chosen, result, report.route(chosen.settings.name, reason), report)
        chosen, (result, tracked) = await run(routing, bounded)
        tracked.finish(None)
        return Routed(chosen, result, routing.trail.route(chosen.settings.name, routing.reason))

    async def open_stream(
        self,
        model: str,
        start: Callable[[Backend], FrameStream],
        operation: str = "chat",
        admit: AdmitDeployment | None = None,
        request: RequestFacts | None = None,
        *,
        resumable: ChatCompletionRequest | CompletionRequest | None = None,
        framed: bool = False,
        facts: dict[str, Any] | None = None,
    ) -> ServedStream:
        """Start a stream and wait for its first frame, retrying and falling back until
        then. Past it, the stream survives a stall or failure where the route resumes:
        ``resumable`` is the request to continue (chat or completion), ``framed`` says its
        frames are OpenAI chunks that can be read back, ``facts`` takes the log's notes."""

        def started(backend: Backend) -> Started:
            return Started(start(backend), framed=framed)

        return await self._open(model, started, operation, admit, request, resumable, facts)

    async def _open(
        self,
        model: str,
        start: Callable[[Backend], Started],
        operation: str,
        admit: AdmitDeployment | None,
        request: RequestFacts | None,
        resumable: ChatCompletionRequest | CompletionRequest | None,
        facts: dict[str, Any] | None,
    ) -> ServedStream:
        async def first_chunk(candidate: Candidate) -> Opening:
            return await _first_frame(candidate, start)

        routing = self.decide(model, request)
        checked = _by_name(admit)
        run = functools.partial(
            self._first_success, operation=operation, admit=checked, model=model
        )
        rule = self.config.models[model].cascade
        report = None
        if rule is not None:
            chosen, opening, tracked, report = await Cascade(rule, model, routing).open(
                run, first_chunk
            )
        elif routing.hedge is not None and len(routing.candidates) > 1:
            lane = functools.partial(run, attempt=first_chunk)
            chosen, (opening, tracked) = await hedged(routing, routing.hedge, lane)
        else:
            chosen, (opening, tracked) = await run(routing, first_chunk)
        reason = routing.trail.route(chosen.settings.name, routing.reason)
        if report is not None:
            reason = report.route(chosen.settings.name, reason)
        opened = OpenedStream(
            chosen, opening.first, opening.stream, reason, tracked, routing, opening.source
        )
        resume = None
        if resumable is not None:
            route = self.config.models[model]
            resumes = route.max_resumes if route.resume and route.fallback else 0
            notes = facts if facts is not None else {}
            refusals = self.fleet.prefill_refusals
            resume = Resume.begin(
                resumes, refusals, opened, resumable, checked, notes, opening.source, opening.framed
            )
        return ServedStream(opened, resume, report, opening.sending)

    async def _first_success(
        self,
        routing: Routing,
        attempt: Callable[[Candidate], Awaitable[T]],
        operation: str,
        admit: Admit | None,
        model: str,
    ) -> tuple[Candidate, tuple[T, Attempt]]:
        def span(candidate: Candidate, retry: int) -> Any:
            return attempt_span(operation, candidate.settings, retry)

        move = None
        if routing.request.prefix_chain and self.kv_moving.may_move(self.route(model).candidates):
            pool = functools.partial(self.policy_candidates, model)
            move = self.kv_moving.preparing(routing.request, routing.trail.moves, pool)
        return await self._failover.first_success(routing, attempt, span, admit, move)


async def _first_frame(candidate: Candidate, start: Callable[[Backend], Started]) -> Opening:
    """``start`` on ``candidate`` and its first frame, within the deployment's time for it
    (a refusal of it named as the client's API names the field)."""
    backend, timeouts = candidate.backend, candidate.settings.timeouts
    first_token_s, total_s = timeouts.first_token_s, timeouts.total_s
    started = start(backend)
    source = started.stream
    iterator: Stream[Any] = source
    if total_s is not None:
        iterator = Deadline(iterator, total_s, backend.name)
    try:
        first = await within(first_token_s, anext(iterator), backend, StalledError)
    except BaseException as exc:
        await _aclose(iterator)
        names = started.sending.names if started.sending is not None else None
        if isinstance(exc, GatewayError) and names is not None:
            names.rename(exc)
        raise
    chunks = source if isinstance(source, Chunks) else None
    return Opening(first, iterator, chunks, started.framed, started.sending)


def _by_name(admit: AdmitDeployment | None) -> Admit | None:
    """``admit`` as the failover calls it, with the candidate."""
    if admit is None:
        return None
    by_name = admit

    async def admit_candidate(candidate: Candidate) -> None:
        await by_name(candidate.settings.name)

    return admit_candidate


async def _memory_fits(config: GatewayConfig) -> dict[str, FitClass]:
    """Each local deployment's memory fit, for the ``fits_memory`` filter."""
    placements = await asyncio.to_thread(plan_deployments, config.deployments, config.devices)
    return {p.deployment: p.plan.fit for p in placements if p.plan is not None}


def config_version(config: GatewayConfig) -> str:
    """A short, stable fingerprint of a config, reported by readiness."""
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:12]


def _same(config: GatewayConfig, deployment: DeploymentConfig) -> bool:
    return any(d == deployment for d in config.deployments)


async def _aclose(iterator: AsyncIterator[object]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


def prefix_readers(config: GatewayConfig) -> frozenset[str]:
    """The models whose requests' prefix chains routing may read (see
    :meth:`Gateway.reads_prefixes`)."""
    routes = config.models.values()
    read = {name for route in routes if route.policy.reads_live for name in route.candidates}
    return frozenset(
        model for model, route in config.models.items() if read.intersection(route.candidates)
    )
