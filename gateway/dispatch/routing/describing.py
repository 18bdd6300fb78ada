"""From gateway state to the plain facts ``policies`` route on, and back.

``policies`` is pure logic; this module is the adapter: it describes each deployment
(config, capabilities with any context length learned from its own rejections, price,
memory fit, breaker state) and each request (estimated prompt tokens, features it needs, a
prefix key for affinity, the prefix chain engines report holding) as ``policies`` data.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from backends.base import Backend, Price
from backends.registry import DeploymentConfig
from gateway.config import GatewayConfig
from gateway.dispatch.failover.attempts import Candidate
from gateway.dispatch.health.breakers import CircuitBreaker
from gateway.dispatch.health.learned import ContextLimits
from gateway.dispatch.health.live import DeploymentTracker
from gateway.planner import ModelSize
from gateway.protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from gateway.protocol.prefix import describe_prefix
from gateway.protocol.repeats import repeated_tool_call
from policies import Candidate as PolicyCandidate
from policies import CandidateFacts, Capabilities, FitClass, Pool, Pricing, RequestFacts

_CHARS_PER_TOKEN = 4
_ROWS_HELD = 4096


class DeploymentDescriber:
    """Each deployment as a policy candidate: configuration, health and live figures. The
    facts are rebuilt only when the deployment's configuration, capabilities, memory fit,
    learned context length or breaker state changed; the live figures are read only for a
    policy that looks at them (``live``), and then from the tracker's own cache. It also
    holds each deployment as dispatch sees it (:meth:`candidate`), built once per config."""

    def __init__(self) -> None:
        self._memo: dict[str, _Described] = {}
        self._tables: _Held | None = None
        self._held: dict[str, Candidate] = {}
        self._rows_of: dict[int, tuple[Sequence[str], list[_Row]]] = {}
        self._pools: dict[tuple[int, bool], tuple[Sequence[str], Pool]] = {}
        self._sizes: dict[str, tuple[DeploymentConfig, ModelSize | None]] = {}

    def size(self, settings: DeploymentConfig) -> ModelSize | None:
        """The deployment's model size (declared, else read from its file once per
        settings); :meth:`learn_sizes` reads them ahead, off the event loop."""
        known = self._sizes.get(settings.name)
        if known is None or known[0] is not settings:
            known = self._sizes[settings.name] = settings, settings.model_size()
        return known[1]

    def learn_sizes(self, deployments: Sequence[DeploymentConfig]) -> None:
        """Read every deployment's size now (a GGUF header each, for local ones)."""
        for settings in deployments:
            self.size(settings)

    def pool(
        self,
        names: Sequence[str],
        gateway: _Tables,
        *,
        live: bool = True,
    ) -> Pool:
        """:meth:`__call__` for each named deployment of ``gateway``, in one loop: with
        hundreds of deployments per model this runs per request, so the deployments' tables
        are looked up once per config and the check that a deployment's facts still hold
        is written out here. The pool is the last call's while no candidate changed (its
        filters' kinds are then worked out already)."""
        memo_get, fits = self._memo.get, gateway.fits.get
        learned = gateway.context_limits.fresh().get
        out: list[PolicyCandidate] = []
        for name, settings, backend, breaker, tracker in self._rows(names, gateway):
            memo = memo_get(name)
            if (
                memo is None
                or (held := memo.inputs)[0] is not settings
                or ((caps := backend.capabilities) is not held[1] and caps != held[1])
                or held[2] != fits(name)
                or held[3] != breaker.state
                or held[4] != breaker.open_until
                or held[5] != breaker.last_failure_at
                or held[6] != learned(name)
                or held[7] != backend.stats().draining
            ):
                out.append(
                    self(settings, backend, breaker, tracker, fits(name), learned(name), live=live)
                )
            elif not live:
                out.append(memo.bare)
            else:
                out.append(self._measured(memo, backend, tracker))
        return self._renewed(names, live, out)

    def _renewed(self, names: Sequence[str], live: bool, out: list[PolicyCandidate]) -> Pool:
        """The pool last handed out for ``names``, renewed with ``out``."""
        key = id(names), live
        held = self._pools.get(key)
        pool = held[1].renewed(out) if held is not None and held[0] is names else Pool(out)
        if len(self._pools) >= _ROWS_HELD:  # bounded as _rows_of is
            self._pools.clear()
        self._pools[key] = names, pool
        return pool

    def candidate(self, name: str, gateway: _Tables) -> Candidate:
        """The deployment as dispatch holds it, built once per config."""
        self._hold(gateway)
        return self._candidate(name)

    def _rows(self, names: Sequence[str], gateway: _Tables) -> list[_Row]:
        """:meth:`candidate` of each of ``names`` as a plain tuple (a tuple unpacks faster
        than four attributes read, and :meth:`pool` reads them per deployment per
        request), the list kept per config."""
        self._hold(gateway)
        held = self._rows_of.get(id(names))
        if held is not None and held[0] is names:
            return held[1]
        rows = [
            (n, c.settings, c.backend, c.breaker, c.tracker)
            for n, c in zip(names, map(self._candidate, names), strict=True)
        ]
        if len(self._rows_of) >= _ROWS_HELD:  # names come from the config's routes; this
            self._rows_of.clear()  # only bounds a caller that passes lists of its own
        self._rows_of[id(names)] = names, rows
        return rows

    def _hold(self, gateway: _Tables) -> None:
        """Keep ``gateway``'s tables; forget what was built from older ones (a reload
        replaces the config and the backend, breaker and tracker tables, never changing
        them in place)."""
        held = self._tables
        if (
            held is None
            or held[0] is not gateway.config
            or held[1] is not gateway.backends
            or held[2] is not gateway.breakers
            or held[3] is not gateway.trackers
        ):
            tables = (gateway.config, gateway.backends, gateway.breakers, gateway.trackers)
            self._tables, self._held, self._rows_of, self._pools = tables, {}, {}, {}

    def _candidate(self, name: str) -> Candidate:
        known = self._held.get(name)
        if known is None:
            assert self._tables is not None  # _hold ran
            config, backends, breakers, trackers = self._tables
            known = self._held[name] = Candidate(
                backends[name], config.deployment(name), breakers[name], trackers[name]
            )
        return known

    def __call__(
        self,
        settings: DeploymentConfig,
        backend: Backend,
        breaker: CircuitBreaker,
        tracker: DeploymentTracker,
        fit: FitClass | None,
        learned_context: int | None = None,
        *,
        live: bool = True,
    ) -> PolicyCandidate:
        key = (
            settings,
            backend.capabilities,
            fit,
            breaker.state,
            breaker.open_until,
            breaker.last_failure_at,
            learned_context,
            backend.stats().draining,
        )
        memo = self._memo.get(settings.name)
        if memo is None or memo.inputs != key:
            facts = _facts(settings, backend, breaker, fit, learned_context)
            bare = PolicyCandidate(_sized(facts, self.size(settings)))
            memo = self._memo[settings.name] = _Described(key, bare, bare)
        if not live:
            return memo.bare
        return self._measured(memo, backend, tracker)

    @staticmethod
    def _measured(
        memo: _Described, backend: Backend, tracker: DeploymentTracker
    ) -> PolicyCandidate:
        figures = tracker.figures(backend.stats())
        if memo.measured.live is not figures:  # the tracker hands back the same if unchanged
            memo.measured = PolicyCandidate(memo.bare.facts, figures)
        return memo.measured


class _Tables(Protocol):
    """What :meth:`DeploymentDescriber.pool` reads of the gateway."""

    @property
    def config(self) -> GatewayConfig: ...

    @property
    def backends(self) -> dict[str, Backend]: ...

    @property
    def breakers(self) -> dict[str, CircuitBreaker]: ...

    @property
    def trackers(self) -> dict[str, DeploymentTracker]: ...

    @property
    def fits(self) -> dict[str, FitClass]: ...

    @property
    def context_limits(self) -> ContextLimits: ...


_Row = tuple[str, DeploymentConfig, Backend, CircuitBreaker, DeploymentTracker]
_Held = tuple[
    GatewayConfig, dict[str, Backend], dict[str, CircuitBreaker], dict[str, DeploymentTracker]
]


@dataclass
class _Described:
    """A deployment's candidate, what its facts were built from, and the candidate with
    the live figures last read."""

    inputs: tuple[object, ...]
    bare: PolicyCandidate
    measured: PolicyCandidate


def _facts(
    settings: DeploymentConfig,
    backend: Backend,
    breaker: CircuitBreaker,
    fit: FitClass | None,
    learned_context: int | None,
) -> CandidateFacts:
    caps = backend.capabilities
    context, learned = caps.context_length, False
    if learned_context is not None and (context is None or learned_context < context):
        context, learned = learned_context, True
    price = settings.price
    pricing = Pricing(
        input_per_1m=_per_1m(price, "input_per_1m"),
        output_per_1m=_per_1m(price, "output_per_1m"),
        usd_per_hour=price.usd_per_hour if price else None,
    )
    open_ = breaker.state == "open"
    draining = backend.stats().draining
    return CandidateFacts(
        name=settings.name,
        backend=settings.backend,
        capabilities=Capabilities(
            tools=caps.tools,
            json_schema=caps.json_schema,
            images=caps.images,
            content_parts=caps.content_parts,
            context_length=context,
            context_learned=learned,
            clamps_output=caps.clamp_output,
        ),
        pricing=pricing,
        fit=fit,
        healthy=not open_ and not draining,
        draining=draining,
        cooled_down_until=breaker.open_until if open_ else None,
        last_failure_at=breaker.last_failure_at,
        weight=settings.weight,
    )


def _sized(facts: CandidateFacts, size: ModelSize | None) -> CandidateFacts:
    if size is None:
        return facts
    return replace(
        facts,
        params_b=size.params_b,
        active_params_b=size.active_params_b,
        size_source=size.source,
    )


def _per_1m(price: Price | None, field: str) -> float | None:
    """A per-token price; unset (not 0) for a deployment priced only by the hour, so that
    routing derives it from the measured throughput."""
    if price is None or (price.usd_per_hour is not None and field not in price.model_fields_set):
        return None
    value: float = getattr(price, field)
    return value


_PREFIX_CHARS = 4096


def describe_request(
    body: ChatCompletionRequest | CompletionRequest | EmbeddingRequest,
    request_id: str = "",
    session_id: str | None = None,
    *,
    prefixes: bool = True,
) -> RequestFacts:
    """What routing needs to know about a request, without tokenizing it. ``session_id``
    names the conversation a chat request continues, where known. ``prefixes`` false:
    no prefix chain (nothing will read it; hashing a long conversation costs about 2.5 ms
    per MB)."""
    if isinstance(body, ChatCompletionRequest):
        return _chat_facts(body, request_id, session_id, prefixes)
    if isinstance(body, CompletionRequest):
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        text = "".join(prompts)
        return RequestFacts(
            prompt_tokens=_estimate(len(text)) + len(prompts),
            max_tokens=body.max_tokens,
            prefix_key=_prefix_key(text[:512]),
            stream=bool(body.stream),
            request_id=request_id,
            n=body.n or 1,
        )
    return RequestFacts(
        prompt_tokens=_embedding_tokens(body.input), max_tokens=0, request_id=request_id
    )


def _embedding_tokens(given: str | list[str] | list[int] | list[list[int]]) -> int:
    """Text at ~4 characters a token; token-id inputs counted exactly."""
    if isinstance(given, str):
        return _estimate(len(given))
    tokens = 0
    for item in given:
        if isinstance(item, str):
            tokens += _estimate(len(item))
        else:
            tokens += len(item) if isinstance(item, list) else 1
    return tokens


def _chat_facts(
    body: ChatCompletionRequest, request_id: str, session_id: str | None, prefixes: bool
) -> RequestFacts:
    text_chars = sum(len(m.text()) for m in body.messages)
    call_chars = sum(
        len(c.model_dump_json()) for m in body.messages if m.tool_calls for c in m.tool_calls
    )
    tool_chars = sum(len(t.model_dump_json()) for t in body.tools or [])
    format_ = body.response_format.type if body.response_format else "text"
    leading = [m for m in body.messages if m.role in ("system", "developer")] or body.messages[:1]
    prefix = body.user or "".join(m.text() for m in leading)
    chain, shared = describe_prefix(body) if prefixes else ((), 0)
    kinds = body.part_kinds()
    return RequestFacts(
        prompt_tokens=_estimate(text_chars + call_chars + tool_chars) + 4 * len(body.messages),
        max_tokens=body.output_limit(),
        needs_tools=bool(body.tools) and body.tool_choice != "none",
        needs_json_schema=format_ == "json_schema",
        has_images="image_url" in kinds,
        content_parts=kinds,
        prefix_key=_prefix_key(prefix),
        stream=bool(body.stream),
        request_id=request_id,
        prefix_chain=chain,
        prefix_shared=shared,
        session_id=session_id,
        n=body.n or 1,
        tool_repeat=_repeat(body),
    )


def _repeat(body: ChatCompletionRequest) -> tuple[str, int] | None:
    repeat = repeated_tool_call(body.messages)
    return None if repeat is None else (repeat.name, repeat.count)


def _estimate(chars: int) -> int:
    return math.ceil(chars / _CHARS_PER_TOKEN)


def _prefix_key(text: str) -> str | None:
    """The affinity key of a prompt: a hash of its first :data:`_PREFIX_CHARS` characters.
    Affinity only needs prompts that share a cached prefix to land together; hashing the
    whole first message cost 2.5 ms per MB on every request."""
    if not text:
        return None
    return hashlib.blake2b(text[:_PREFIX_CHARS].encode(), digest_size=8).hexdigest()
