"""Dispatch: pick deployments for a public model name and run the request on them.

Retries and fallback happen only before anything has been sent to the client: a stream is
"opened" by pulling its first chunk, and only a failure up to that point is retried on the
same deployment or moved to the next candidate (the rules are in
:mod:`gateway.dispatch.failover`). Errors caused by the request itself (4xx) are never
retried; a prompt too long for one deployment moves to a larger one. Each deployment has a
circuit breaker, probed in the background while open (:mod:`gateway.dispatch.probing`);
when every candidate's breaker is open the client gets a 503 that says so, with the time
until the first one may be tried again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import structlog
from opentelemetry import trace

from backends.base import Backend
from backends.registry import DeploymentConfig
from gateway.config import GatewayConfig, ModelRoute
from gateway.dispatch.attempts import Candidate, nothing_can_serve, within
from gateway.dispatch.cascade import Cascade, CascadeReport
from gateway.dispatch.failover import Admit, Failover, InOrder, Routing, Trail
from gateway.dispatch.learned import ContextLimits
from gateway.dispatch.live import Attempt, DeploymentTracker
from gateway.dispatch.probing import Prober
from gateway.dispatch.reliability import CircuitBreaker, new_breaker
from gateway.dispatch.resume import ResumeBook
from gateway.dispatch.routing import DeploymentDescriber
from gateway.errors import GatewayError, ModelNotFoundError, StalledError
from gateway.protocol import ModelList
from gateway.protocol.common import Model
from gateway.protocol.frames import Deadline, FrameStream
from gateway.residency.placement import plan_deployments
from gateway.residency.resident import Residency
from gateway.telemetry.tracing import attempt_span, note_decision
from policies import Candidate as PolicyCandidate
from policies import Decision, FitClass, Hedge, RequestFacts

T = TypeVar("T")
Opened = tuple["Candidate", tuple[tuple[bytes, "FrameStream"], "Attempt"]]
log = structlog.get_logger("shunter.dispatch")


@dataclass(frozen=True)
class Routed(Generic[T]):
    """A whole response, the deployment that gave it, and why that one (after any
    fallback: ``b after a: rate_limited; policy: ...``)."""

    candidate: Candidate
    value: T
    reason: str
    cascade: CascadeReport | None = None


@dataclass
class OpenedStream:
    """A stream whose first frame has arrived: safe to commit the HTTP response.

    Whoever consumes ``rest`` reports the end through ``attempt.finish(tokens)``. ``reason``
    is as in :class:`Routed`; ``routing`` is the decision, whose other candidates may
    continue the stream if it fails (:mod:`gateway.dispatch.resume`)."""

    candidate: Candidate
    first: bytes
    rest: FrameStream
    reason: str
    attempt: Attempt
    routing: Routing | None = None
    cascade: CascadeReport | None = None

    @property
    def backend(self) -> Backend:
        return self.candidate.backend


class Gateway:
    """Holds the live config and its backends; routes requests to them."""

    def __init__(
        self,
        config: GatewayConfig,
        backends: dict[str, Backend],
        residency: Residency | None = None,
    ) -> None:
        self.config = config
        self.backends = backends
        self.residency = residency or Residency(config.local_models, config.devices)
        self.ready = False
        self.draining = False
        self.tracer: trace.Tracer = trace.NoOpTracer()
        self._describe = DeploymentDescriber()
        self._retiring: set[asyncio.Task[None]] = set()
        self.on_reload: list[Callable[[GatewayConfig], None]] = []
        self.breakers = {name: new_breaker(config.reliability) for name in backends}
        self.trackers = {name: DeploymentTracker() for name in backends}
        self.fits: dict[str, FitClass] = {}
        self.config_version = config_version(config)
        self.context_limits = ContextLimits()
        self.resumes = ResumeBook()
        self._failover = Failover(config.reliability, self.context_limits)
        self.prober = Prober(self._probe_targets, config.reliability.probe_interval_s)

    @classmethod
    def from_config(cls, config: GatewayConfig) -> Gateway:
        residency = Residency(config.local_models, config.devices)
        return cls(config, {d.name: residency.create(d) for d in config.deployments}, residency)

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
        self.breakers = {
            **{name: self.breakers[name] for name in keep},
            **{name: new_breaker(config.reliability) for name in fresh},
        }
        self.context_limits.keep_only(keep)  # a changed deployment may hold more now
        self._failover = Failover(config.reliability, self.context_limits)
        self.trackers = {
            **{name: self.trackers[name] for name in keep},
            **{name: DeploymentTracker() for name in fresh},
        }
        fits = await _memory_fits(config)
        await asyncio.to_thread(self._describe.learn_sizes, config.deployments)
        self.config, self.backends, self.fits = config, {**keep, **fresh}, fits
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
        self.ready = True

    async def aclose(self) -> None:
        self.ready = False
        await self.prober.stop()
        await self.residency.stop()
        await asyncio.gather(*self._retiring, return_exceptions=True)
        await asyncio.gather(*(b.aclose() for b in self.backends.values()))

    def model_list(self) -> ModelList:
        return ModelList(data=[Model(id=name) for name in self.config.models])

    def route(self, model: str) -> ModelRoute:
        route = self.config.models.get(model)
        if route is None:
            raise ModelNotFoundError(
                f"The model '{model}' does not exist or you do not have access to it.",
                param="model",
            )
        return route

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
        )

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

    def deployment_health(self, name: str) -> dict[str, object]:
        """A deployment's breaker and learned context, for readiness and ``shunter route``."""
        breaker = self.breakers.get(name)
        return {
            "breaker": breaker.state if breaker else "closed",
            "breaker_retry_in_s": round(breaker.retry_in(), 3) if breaker else 0.0,
            "context_learned": self.context_limits.get(name),
        }

    def adopt(self, deployments: Mapping[str, Any]) -> None:
        """Take in a running gateway's view of its deployments (readiness's
        ``deployments``): learned context lengths and open breakers, so that an offline
        explain (``shunter route --live``) routes as that gateway would."""
        for name, seen in deployments.items():
            if name not in self.breakers or not isinstance(seen, Mapping):
                continue
            learned = seen.get("context_learned")
            if isinstance(learned, int) and learned > 0:
                self.context_limits.learn(name, learned)
            retry_in = seen.get("breaker_retry_in_s")
            if seen.get("breaker") == "open" and isinstance(retry_in, int | float):
                self.breakers[name].open_for(float(retry_in))

    def _probe_targets(self) -> dict[str, tuple[Backend, CircuitBreaker]]:
        breakers = self.breakers
        return {n: (b, breakers[n]) for n, b in self.backends.items() if n in breakers}

    def policy_candidates(self, model: str, *, live: bool = True) -> Sequence[PolicyCandidate]:
        """``model``'s deployments as routing sees them now: config, health and (unless
        ``live`` is false: the policy does not read them) live figures."""
        return self._describe.pool(self.route(model).candidates, self, live=live)

    async def call(
        self,
        model: str,
        attempt: Callable[[Backend], Awaitable[T]],
        operation: str = "chat",
        admit: Admit | None = None,
        request: RequestFacts | None = None,
    ) -> Routed[T]:
        """Run a whole (non-streaming) request, with retries and fallback."""

        async def bounded(candidate: Candidate) -> T:
            limit = candidate.settings.timeouts.total_s
            return await within(limit, attempt(candidate.backend), candidate.backend)

        routing = self.decide(model, request)
        rule = self.config.models[model].cascade
        if rule is not None and operation != "embeddings":
            run = functools.partial(self._first_success, operation=operation, admit=admit)
            chosen, result, tracked, report = await Cascade(rule, model, routing).call(run, bounded)
            tracked.finish(None)
            reason = routing.trail.route(chosen.settings.name, routing.reason)
            return Routed(chosen, result, report.route(chosen.settings.name, reason), report)
        chosen, (result, tracked) = await self._first_success(routing, bounded, operation, admit)
        tracked.finish(None)
        return Routed(chosen, result, routing.trail.route(chosen.settings.name, routing.reason))

    async def open_stream(
        self,
        model: str,
        start: Callable[[Backend], FrameStream],
        operation: str = "chat",
        admit: Admit | None = None,
        request: RequestFacts | None = None,
    ) -> OpenedStream:
        """Start a stream and wait for its first frame, retrying and falling back until then."""

        async def first_chunk(candidate: Candidate) -> tuple[bytes, FrameStream]:
            backend, timeouts = candidate.backend, candidate.settings.timeouts
            first_token_s, total_s = timeouts.first_token_s, timeouts.total_s
            iterator = start(backend)
            if total_s is not None:
                iterator = Deadline(iterator, total_s, backend.name)
            try:
                first = await within(first_token_s, anext(iterator), backend, StalledError)
                return first, iterator
            except BaseException:
                await _aclose(iterator)
                raise

        routing = self.decide(model, request)
        rule = self.config.models[model].cascade
        if rule is not None:
            run = functools.partial(self._first_success, operation=operation, admit=admit)
            cascade = Cascade(rule, model, routing)
            chosen, first, rest, tracked, report = await cascade.open(run, first_chunk)
            reason = routing.trail.route(chosen.settings.name, routing.reason)
            reason = report.route(chosen.settings.name, reason)
            return OpenedStream(chosen, first, rest, reason, tracked, routing, report)
        if routing.hedge is not None and len(routing.candidates) > 1:
            opened = await self._hedged(routing, routing.hedge, first_chunk, operation, admit)
        else:
            opened = await self._first_success(routing, first_chunk, operation, admit)
        chosen, ((first, rest), tracked) = opened
        reason = routing.trail.route(chosen.settings.name, routing.reason)
        return OpenedStream(chosen, first, rest, reason, tracked, routing)

    async def _hedged(
        self,
        routing: Routing,
        hedge: Hedge,
        first_chunk: Callable[[Candidate], Awaitable[tuple[bytes, FrameStream]]],
        operation: str,
        admit: Admit | None,
    ) -> Opened:
        """Start the best candidate; if its first frame is late, race the next one too.
        The first stream to produce a frame wins; the other is cancelled and closed."""
        first, second, *rest = routing.candidates
        lanes = [replace(routing, candidates=[first, *rest]), replace(routing, candidates=[second])]

        def run(lane: Routing) -> asyncio.Task[Opened]:
            return asyncio.ensure_future(self._first_success(lane, first_chunk, operation, admit))

        primary = run(lanes[0])
        tasks, winner, failure = {primary}, None, None
        try:
            done, _ = await asyncio.wait(tasks, timeout=hedge.after_ms / 1000)
            if done and (_client_fault(primary) or primary.exception() is None):
                winner = primary
                return primary.result()
            log.info("hedging", late=first.settings.name, backup=second.settings.name)
            tasks.add(run(lanes[1]))
            failure, pending = primary.exception() if done else None, tasks - done
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.exception() is None or _client_fault(task):
                        winner = task
                        return task.result()
                    failure = failure or task.exception()
        finally:
            losers = tasks - {winner}
            for task in losers:
                task.cancel()
            await _discard(losers)
        assert failure is not None
        raise failure

    async def _first_success(
        self,
        routing: Routing,
        attempt: Callable[[Candidate], Awaitable[T]],
        operation: str,
        admit: Admit | None,
    ) -> tuple[Candidate, tuple[T, Attempt]]:
        def span(candidate: Candidate, retry: int) -> Any:
            return self._client_span(operation, candidate, retry)

        return await self._failover.first_success(routing, attempt, span, admit)

    def _client_span(self, operation: str, candidate: Candidate, retry: int) -> Any:
        """One span per upstream attempt, in GenAI terms (nothing when traces are off)."""
        return attempt_span(operation, candidate.settings, retry)


async def _memory_fits(config: GatewayConfig) -> dict[str, FitClass]:
    """Each local deployment's memory fit, for the ``fits_memory`` filter."""
    placements = await asyncio.to_thread(plan_deployments, config.deployments, config.devices)
    return {p.deployment: p.plan.fit for p in placements if p.plan is not None}


def config_version(config: GatewayConfig) -> str:
    """A short, stable fingerprint of a config, reported by readiness."""
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:12]


def _same(config: GatewayConfig, deployment: DeploymentConfig) -> bool:
    return any(d == deployment for d in config.deployments)


def _client_fault(task: asyncio.Task[Opened]) -> bool:
    """Did the request itself fail (a 4xx): no other candidate would do better."""
    exc = task.exception()
    return isinstance(exc, GatewayError) and not exc.counts_as_failure


async def _discard(tasks: set[asyncio.Task[Opened]]) -> None:
    """Wait for cancelled racers; a loser that still won its own race gets closed."""
    for task in tasks:
        with contextlib.suppress(BaseException):
            _, ((_, stream), tracked) = await task
            tracked.finish(None)
            await stream.aclose()


async def _aclose(iterator: AsyncIterator[object]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()
