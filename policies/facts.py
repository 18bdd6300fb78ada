"""Plain, frozen inputs to routing: what a request needs, what a deployment is, how it is doing.

The gateway builds these from its config and its live counters; the simulator in
``bench/route_sim.py`` builds them from its own model. Nothing here does I/O.

Units: milliseconds for latencies, tokens per second for rates, US dollars for money,
seconds (on the caller's monotonic clock) for ``cooled_down_until`` and ``now``.
``None`` always means "not known here", never zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

FitClass = Literal["fits", "kv_spills", "partial_offload", "does_not_fit"]
"""How a model fits a device, as the memory planner (``gateway.planner``) classifies it."""

FIT_CLASSES: tuple[FitClass, ...] = ("fits", "kv_spills", "partial_offload", "does_not_fit")

DEFAULT_OUTPUT_TOKENS = 256
"""Output length assumed for cost and latency estimates when a request sets no ``max_tokens``."""


@dataclass(frozen=True)
class RequestFacts:
    """What one request needs, as far as routing cares.

    ``prefix_key`` is anything that identifies reusable context (a session id, or a hash
    of the system prompt and leading messages); ``affinity`` sends equal keys to the same
    deployment. ``request_id`` seeds the deterministic draw of ``weighted``.
    ``expected_output_tokens`` overrides the guess used for cost and latency.

    ``prefix_chain`` is the request's chain of prefix links, shortest first: each a hash
    and the characters of canonical content it covers (``gateway.protocol.prefix``); an
    engine that reports holding a link holds the KV of that much of the prompt. Its first
    ``prefix_shared`` links cover what many conversations share (tools, system prompt):
    holding only those makes no candidate a conversation's home.
    ``session_id``, when known, names the conversation: between candidates that hold
    equal prefixes, ``cached_prefix`` sends a session where it hashes to.
    ``content_parts`` are the types of the chat content parts it carries (``text``,
    ``image_url``, ``input_audio``...); ``has_images``: one of them is an image.

    The same description serves admission, which reserves ``prompt_tokens`` and the
    output of ``n`` choices: ``tool_repeat`` is the tool call the conversation ends
    repeating and how many times in a row (a session's loop guard reads it);
    ``server_tools``: the upstream's own tools the request offers, with the most uses of
    each it allows (``None``: not given), priced per use; ``upstream_prompt_tokens``:
    the prompt tokens a deployment is expected to count for it where that is more than
    ``prompt_tokens`` (what the deployment reported before: a provider's own system prompt,
    a template or a document it counts but the estimate cannot see), by deployment name.
    """

    prompt_tokens: int
    max_tokens: int | None = None
    needs_tools: bool = False
    needs_json_schema: bool = False
    has_images: bool = False
    content_parts: frozenset[str] = frozenset()
    prefix_key: str | None = None
    stream: bool = False
    request_id: str = ""
    expected_output_tokens: int | None = None
    prefix_chain: tuple[tuple[str, int], ...] = ()
    prefix_shared: int = 0
    session_id: str | None = None
    n: int = 1
    tool_repeat: tuple[str, int] | None = None
    server_tools: Mapping[str, int | None] = field(default_factory=dict, hash=False, compare=False)
    upstream_prompt_tokens: Mapping[str, int] = field(
        default_factory=dict, hash=False, compare=False
    )

    def prompt_at(self, deployment: str) -> int:
        """The prompt tokens ``deployment`` is expected to count for this request."""
        return max(self.prompt_tokens, self.upstream_prompt_tokens.get(deployment, 0))

    @property
    def output_tokens(self) -> int:
        """Output tokens to plan for: the hint, else ``max_tokens``, else a default."""
        if self.expected_output_tokens is not None:
            return self.expected_output_tokens
        if self.max_tokens is not None:
            return self.max_tokens
        return DEFAULT_OUTPUT_TOKENS


@dataclass(frozen=True)
class Capabilities:
    """What a deployment can serve. ``context_length`` ``None`` means unknown (not checked);
    ``context_learned``: the length comes from the deployment's own rejection of a longer
    prompt, not from its configuration. ``content_parts``: the content part types it reads
    (an engine in this process), or ``None``: it passes every part on to an upstream that
    decides (a remote API), images only where ``images`` is set."""

    tools: bool = False
    json_schema: bool = False
    images: bool = False
    content_parts: frozenset[str] | None = None
    context_length: int | None = None
    context_learned: bool = False
    clamps_output: bool = False
    """Lowers an output budget that cannot fit to what does: only the prompt must fit."""

    def reads(self, kind: str) -> bool:
        """Whether a content part of type ``kind`` can be sent here."""
        if kind == "image_url" and not self.images:
            return False
        return self.content_parts is None or kind in self.content_parts

    def budget(self, max_tokens: int | None) -> int:
        """The output tokens a request asking for ``max_tokens`` needs room for here."""
        return 1 if self.clamps_output else max_tokens or 0


@dataclass(frozen=True)
class Pricing:
    """What a deployment costs.

    Per-token prices (dollars per million tokens) win when given. Otherwise a local
    deployment's ``usd_per_hour`` is turned into per-token prices with its measured (or
    declared) prefill and decode capacity: $/hour ÷ (3600 x tokens/s) per token.
    """

    input_per_1m: float | None = None
    output_per_1m: float | None = None
    usd_per_hour: float | None = None


@dataclass(frozen=True)
class CandidateFacts:
    """A deployment as configured, plus its health state.

    ``max_concurrency`` is the capacity ``least_loaded`` divides by when the deployment
    reports no slots (for an API: its concurrency or rate limit). ``base_ttft_ms`` is a
    fixed part of time to first token (network, scheduling) added to prefill time.
    ``last_failure_at`` lets ``healthy`` pick the least-recently-failed one as a last resort.
    ``params_b`` is the model's size in billions of parameters (``active_params_b``: what one
    token uses, for a mixture of experts); ``size_source`` says where it came from
    (``declared``, ``gguf``, ``hf-config``).
    """

    name: str
    backend: str
    capabilities: Capabilities = field(default_factory=Capabilities)
    pricing: Pricing = field(default_factory=Pricing)
    fit: FitClass | None = None
    healthy: bool = True
    cooled_down_until: float | None = None
    last_failure_at: float | None = None
    weight: float = 1.0
    max_concurrency: int | None = None
    base_ttft_ms: float = 0.0
    params_b: float | None = None
    active_params_b: float | None = None
    size_source: str | None = None
    draining: bool = False
    """The engine is shutting down: it takes no new requests (``healthy`` is false), but
    its KV cache may still be moved out."""


@dataclass(frozen=True)
class LiveFigures:
    """Recent measurements of one deployment, kept by the gateway (EWMA where it says so).

    ``decode_tokens_per_s`` is the aggregate decode rate the engine sustains with its slots
    full (all streams together); ``prefill_tokens_per_s`` its prompt-processing rate (as
    llama.cpp's ``prompt_tokens_seconds`` reports it). ``prefill_backlog_tokens`` counts
    prompt tokens of requests sent to the deployment that have not had their first token
    yet, less what the engine held of each (the gateway knows this itself): a new prompt
    waits for them. Queue wait comes
    from ``ewma_service_ms`` (how long a request holds a slot) and ``departures_per_s``
    (requests finished per second, recently). ``kv_used``/``kv_total`` are in any
    consistent unit (tokens, blocks, bytes). ``queue_limit`` is the most requests the
    engine lets wait (it refuses more). ``held_prefixes`` maps the prefix links whose KV
    the engine holds (or was just sent) to their depth in tokens.
    ``tokens_per_char`` is the engine's tokens per character of canonical prompt content
    (``gateway.protocol.prefix``), calibrated from the depths it reports: the request's
    size there is its characters at this ratio rather than the gateway's own estimate.

    KV moves (:mod:`policies.kvmove`): ``kv_fingerprint`` is the digest a moved state must
    match (equal digests: a state moves between the two); ``kv_bytes_per_token`` the size
    of one token's KV state there (learned from moves, else the engine's word from its
    model shape); ``kv_move_bytes_per_s`` and ``kv_import_bytes_per_s`` the rates measured
    on moves into it (the transfer, and the import's own time).
    """

    ewma_ttft_ms: float | None = None
    ewma_itl_ms: float | None = None
    ewma_service_ms: float | None = None
    departures_per_s: float | None = None
    error_rate: float = 0.0
    in_flight: int = 0
    queue_depth: int = 0
    slots_busy: int | None = None
    slots_total: int | None = None
    kv_used: float | None = None
    kv_total: float | None = None
    prefill_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None
    prefill_backlog_tokens: int = 0
    queue_limit: int | None = None
    held_prefixes: Mapping[str, int] = field(default_factory=dict, hash=False)
    tokens_per_char: float | None = None
    kv_fingerprint: str | None = None
    kv_bytes_per_token: float | None = None
    kv_move_bytes_per_s: float | None = None
    kv_import_bytes_per_s: float | None = None


@dataclass(frozen=True)
class Candidate:
    """One deployment as routing sees it: configuration and live figures together."""

    facts: CandidateFacts
    live: LiveFigures = field(default_factory=LiveFigures)

    @property
    def name(self) -> str:
        """The deployment's name."""
        return self.facts.name
