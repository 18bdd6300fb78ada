"""The one contract every backend implements, and the settings every deployment shares.

A backend serves one deployment: a model on an engine (in-process llama.cpp or vLLM) or
behind a remote API. The gateway talks to it only through :class:`Backend`, a base class
every backend derives from:

* ``chat`` / ``completion`` answer a whole request;
* ``chat_stream`` / ``completion_stream`` yield OpenAI chunks as they are produced. The
  last chunk of every stream carries ``usage`` (with ``choices: []``); the gateway forwards
  it only when the client asked for it, and always uses it for accounting;
* ``stats`` returns live figures for routing and metrics, without I/O;
* ``start`` / ``aclose`` acquire and release the engine or connection pool.

Abilities some deployments have are methods of :class:`Backend` too, each with a default
that raises :class:`NotSupportedError`; :class:`Capabilities` says which a deployment has,
and callers read it before they call (it is the one place that says so):

* ``embeddings`` (``capabilities.embeddings``);
* ``chat_stream_raw``: the upstream's chat frames as they came (``chat_stream_raw``);
* ``native`` / ``native_stream`` / ``count_native_tokens``: a client API (Anthropic's
  Messages) spoken natively by the upstream (``native_apis``);
* ``count_tokens``: a chat prompt's exact token count (``count_tokens``);
* ``export_kv`` / ``import_kv``: one sequence's KV cache moved to another engine
  (``kv_move``; the header and wire: :mod:`backends.kv`);
* ``health``: a cheap probe; by default the backend's own state (not stalled).

A backend that wraps another derives from :class:`backends.wrapper.WrapperBackend`, which
forwards all of it, and overrides only what it changes.

Errors are raised as :mod:`gateway.errors` classes; each backend maps its own failures in
a private ``_map_errors`` step. Cancelling a stream's consumer (client disconnect) must stop
the work it started.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backends.kv import KvHeader, KvImported
from gateway.errors import InvalidRequestError
from gateway.planner import Device, MemoryPlan, ModelSize
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResponse,
    Usage,
)
from gateway.protocol.frames import FrameStream


class Price(BaseModel):
    """What a deployment costs: dollars per million tokens, and per use of each server tool
    the upstream runs itself (``server_tools: {web_search: 0.01}``: Anthropic's web search
    at $10 per 1,000)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_1m: float = Field(default=0.0, ge=0)
    output_per_1m: float = Field(default=0.0, ge=0)
    usd_per_hour: float | None = Field(
        default=None, ge=0, description="for local engines: routing turns it into $/token"
    )
    server_tools: dict[str, float] = Field(
        default_factory=dict, description="dollars per use of each server tool, by name"
    )
    server_tool_reserve: int = Field(
        default=10,
        ge=0,
        description="uses of a priced server tool a budget holds when the request sets no max_uses",
    )

    def server_tools_usd(self, uses: Mapping[str, int | None]) -> float:
        """What ``uses`` of server tools cost (a ``None`` count: the reserve)."""
        return sum(
            usd * (self.server_tool_reserve if uses[name] is None else uses[name] or 0)
            for name, usd in self.server_tools.items()
            if name in uses
        )


def cost_usd(
    price: Price | None,
    prompt_tokens: int,
    completion_tokens: int,
    server_tool_uses: Mapping[str, int | None] | None = None,
) -> float:
    """What a request cost at a deployment's price (0 when it has none)."""
    if price is None:
        return 0.0
    tokens = prompt_tokens * price.input_per_1m + completion_tokens * price.output_per_1m
    return tokens / 1e6 + (price.server_tools_usd(server_tool_uses) if server_tool_uses else 0.0)


def usage_cost(price: Price | None, usage: Usage) -> float:
    """What an answer with ``usage`` cost at ``price``: its tokens and server tool uses."""
    return cost_usd(price, usage.prompt_tokens, usage.completion_tokens, usage.server_tool_uses)


CONTINUE_FINAL = {"continue_final_message": True, "add_generation_prompt": False}
"""The extra fields of a continuation (vLLM's names): the request's last message, an
assistant's, is to be continued rather than closed, and no new assistant turn opened."""


def continues_final(request: ChatCompletionRequest) -> bool:
    """Whether ``request`` asks for its last (assistant) message to be continued."""
    extra = request.model_extra or {}
    return bool(extra.get("continue_final_message")) and request.messages[-1].role == "assistant"


class Timeouts(BaseModel):
    """Per-deployment time limits, in seconds; ``None`` means no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    connect_s: float | None = Field(default=5.0, gt=0)
    first_token_s: float | None = Field(default=None, gt=0)
    total_s: float | None = Field(default=None, gt=0)
    stall_s: float | None = Field(
        default=None,
        gt=0,
        description="mid-stream, the longest wait for the next chunk: past it the stream has "
        "stalled (and is resumed on another candidate where the route allows)",
    )


MESSAGES_DROP = ("metadata", "context_management")
"""What a Messages request loses by default on its way to a chat upstream: tracking
metadata and Anthropic's server-side context editing."""


class DeploymentSettings(BaseModel):
    """Fields every deployment has; each backend adds its own and a ``backend`` literal."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    in_process: ClassVar[bool] = True
    """Its engine runs inside the gateway's process (a model in this process's memory)."""
    server_tool_prices: ClassVar[Mapping[str, float]] = {}
    """Dollars per use of each server tool the provider runs itself, at its published
    prices: a priced deployment bills them unless its ``price.server_tools`` says otherwise."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:/-]+$")
    model: str = Field(min_length=1)
    price: Price | None = None
    timeouts: Timeouts = Timeouts()
    weight: float = Field(default=1.0, gt=0, description="share under the weighted policy")
    device: str | None = Field(default=None, description="where it runs, for memory planning")
    rpm: int | None = Field(default=None, ge=1, description="requests per minute, all replicas")
    tpm: int | None = Field(default=None, ge=1, description="tokens per minute, all replicas")
    params_b: float | None = Field(
        default=None, gt=0, description="model size, billions of parameters (local: read if unset)"
    )
    active_params_b: float | None = Field(
        default=None, gt=0, description="a mixture of experts: billions of parameters per token"
    )
    clamp_output: bool = Field(
        default=False,
        description=(
            "a Messages request translated for this deployment whose output budget cannot "
            "fit the context gets the budget that fits (x-shunter-clamped says so) instead "
            "of a refusal"
        ),
    )
    messages_drop: list[str] = Field(
        default_factory=lambda: list(MESSAGES_DROP),
        description=(
            "Messages request fields this deployment drops (the answer names them in "
            "x-shunter-dropped) where a translation to chat cannot map them; any other is "
            "refused with a 400 naming it. Names: a top-level field, a content block type "
            "(document, search_result...), 'server_tools', 'output_config.<key>'"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _published_server_tool_prices(cls, data: Any) -> Any:
        """A priced deployment's server tools at the provider's published prices, where
        its own ``price.server_tools`` names no price of its own (``0``: not billed)."""
        if not cls.server_tool_prices or not isinstance(data, dict):
            return data
        price = data.get("price")
        if isinstance(price, Price):
            price = price.model_dump(exclude_unset=True)
        if not isinstance(price, dict):
            return data
        own = price.get("server_tools") or {}
        if not isinstance(own, dict):
            return data  # not a table: validation names it
        tools = {**cls.server_tool_prices, **own}
        return {**data, "price": {**price, "server_tools": tools}}

    def memory_plan(self, devices: Mapping[str, Device]) -> MemoryPlan | str:
        """How this deployment's model fits the device it runs on, among ``devices`` (by
        name), or why there is no plan. Only a model held in this machine's memory has one."""
        return "no local memory to plan"

    def file_size(self) -> ModelSize | None:
        """The model's size as its own files give it (a local model only); ``None`` when
        there is nothing to read. May read files: ``OSError`` / ``ValueError`` on failure."""
        return None

    def model_size(self) -> ModelSize | None:
        """The size routing uses: ``params_b`` when declared, else the files' (``None``
        when neither is known or the files cannot be read)."""
        if self.params_b is not None:
            return ModelSize(self.params_b, self.active_params_b)
        try:
            found = self.file_size()
        except (OSError, ValueError):
            return None
        if found is not None and self.active_params_b is not None:
            return ModelSize(found.params_b, self.active_params_b, found.source)
        return found

    def returns_logprobs(self) -> bool:
        """Whether its answers can carry token logprobs (what a cascade judges)."""
        return False

    def reports_held_prefixes(self) -> bool:
        """Whether its engine reports the prompt prefixes its KV cache holds (what placing
        conversations by prefix reads)."""
        return False

    def kv_move_limits(self) -> tuple[int, float] | None:
        """The most bytes one sequence's KV state imported here may take, and the seconds
        a move may last; ``None``: its engine moves no KV."""
        return None

    # what it needs from the machine it runs on (``check-config``, and before serving)

    def upstream_url(self) -> str | None:
        """Where its remote API answers (``check-config`` asks whether it does); ``None``
        for an engine in this process."""
        return None

    def key_variable(self) -> str | None:
        """The environment variable its API key is read from, which must be set; ``None``:
        it sends no key."""
        return None

    def engine_missing(self) -> str | None:
        """Why its engine cannot run here (not installed, an untested version), or
        ``None``. May look at installed packages; imports no engine."""
        return None


@dataclass(frozen=True)
class Capabilities:
    """What a deployment can serve: the router filters on these, and the request path
    calls an optional :class:`Backend` method only where its flag is set."""

    chat: bool = True
    completions: bool = True
    embeddings: bool = False
    tools: bool = False
    json_schema: bool = False
    images: bool = False
    content_parts: frozenset[str] | None = None
    """The chat content part types it reads (``text``, ``image_url``, ``input_audio``...),
    or ``None``: it passes every part on to an upstream that decides (images only where
    ``images`` is set). Routing sends a part only where it is read, and a model none of
    whose deployments reads it refuses it by name."""
    context_length: int | None = None
    prefill: bool = True
    """Continues a trailing assistant message (a resumed stream's preferred form)."""
    chat_stream_raw: bool = False
    """Hands over its upstream's chat frames untouched (:meth:`Backend.chat_stream_raw`),
    cheaper than framing parsed chunks."""
    native_apis: frozenset[str] = frozenset()
    """The client APIs its upstream speaks itself (``messages``: Anthropic's Messages),
    whose requests it takes as the client sent them (:meth:`Backend.native`,
    :meth:`~Backend.native_stream`, :meth:`~Backend.count_native_tokens`)."""
    count_tokens: bool = False
    """Counts a chat request's prompt tokens exactly (:meth:`Backend.count_tokens`)."""
    clamp_output: bool = False
    """Lowers a translated Messages request's output budget to what fits the context."""
    messages_drop: frozenset[str] = frozenset(MESSAGES_DROP)
    """What a Messages request translated for it may lose, reported (the settings'
    ``messages_drop``)."""
    kv_move: bool = False
    """Exports and imports one sequence's KV cache (:meth:`Backend.export_kv`,
    :meth:`~Backend.import_kv`)."""

    def reads(self, kind: str) -> bool:
        """Whether a content part of type ``kind`` may be sent here (see
        :attr:`content_parts`)."""
        if kind == "image_url" and not self.images:
            return False
        return self.content_parts is None or kind in self.content_parts


@dataclass(frozen=True)
class LiveStats:
    """Live figures a backend reports without I/O. ``None`` means "not measured here"."""

    in_flight: int = 0
    queue_depth: int = 0
    slots_busy: int | None = None
    slots_total: int | None = None
    kv_used: int | None = None
    kv_total: int | None = None
    prefill_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None
    prefix_hit_rate: float | None = None
    """Share of prompt tokens served from cached KV instead of prefilled (0..1)."""
    prefix_hit_tokens: int | None = None
    """Prompt tokens served from cached KV since start."""
    loaded: bool | None = None
    """A local model loaded on demand: is it in memory now? ``None``: always available."""
    stalled: bool | None = None
    """An in-process engine with work has made no progress for its stall timeout: it fails
    its requests and takes no new ones until it moves again. ``None``: not watched here."""
    queue_limit: int | None = None
    """The most requests it lets wait for a slot (it refuses more); ``None``: not known."""
    held_prefixes: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Prefix links (``gateway.protocol.prefix``) whose KV its sequences hold, each with
    its depth in tokens: a bounded set, refreshed as sequences are filled and trimmed."""
    kv_fingerprint: str | None = None
    """The digest of what a KV state moved here must have been computed with
    (:class:`backends.kv.KvFingerprint`); ``None``: it takes no KV moves (or not yet)."""
    kv_bytes_per_token: float | None = None
    """One token's KV state in bytes, from the model's shape and KV cache type (what a
    moved state weighs); ``None``: not known here."""
    held_sequences: tuple[tuple[str, int], ...] = ()
    """Each sequence holding a prefix: its deepest held link and that link's depth in
    tokens, most recently filled first (what a drain hands over first)."""
    draining: bool = False
    """The engine's server is shutting down: it takes no new requests, and its held
    sequences may still be exported for a while (a worker's handoff window)."""


class NotSupportedError(InvalidRequestError):
    """A deployment was asked for an ability its :class:`Capabilities` do not list. Routing
    and the request path read the flags first, so a client sees this only where a caller
    skipped them; it says nothing of the deployment's health."""

    default_code = "not_supported"


class Backend(ABC):
    """One deployment behind one engine or API (see the module docstring)."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The deployment's name, unique in the config."""

    @property
    @abstractmethod
    def capabilities(self) -> Capabilities:
        """What it serves, and which optional methods it answers."""

    @abstractmethod
    async def start(self) -> None:
        """Load the engine or open connections; called once before serving."""

    @abstractmethod
    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion: ...

    @abstractmethod
    def chat_stream(self, request: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        """Yield chunks; the last one has ``choices == []`` and ``usage`` set."""

    @abstractmethod
    async def completion(self, request: CompletionRequest) -> Completion: ...

    @abstractmethod
    def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        """Yield text-completion chunks; the last one has ``choices == []`` and ``usage``."""

    @abstractmethod
    def stats(self) -> LiveStats: ...

    @abstractmethod
    async def aclose(self) -> None:
        """Stop work and release memory or connections."""

    # --- optional: each answers only where its capability is set ------------------------

    async def embeddings(self, request: EmbeddingRequest) -> EmbeddingResponse:
        """``/v1/embeddings`` (``capabilities.embeddings``)."""
        raise self.not_supported("embeddings")

    def chat_stream_raw(self, request: ChatCompletionRequest) -> FrameStream:
        """The upstream's chat frames, untouched (``capabilities.chat_stream_raw``)."""
        raise self.not_supported("raw chat streams")

    async def count_tokens(self, request: ChatCompletionRequest) -> int:
        """The prompt tokens of a chat request, exactly (``capabilities.count_tokens``)."""
        raise self.not_supported("exact token counts")

    async def native(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> tuple[bytes, Usage]:
        """The upstream's whole answer to ``body``, a request in the client API ``api``
        (the client's bytes, sent as they are but for ``model``, with the client's
        ``headers`` for the upstream), as it answered, and its usage
        (``api`` in ``capabilities.native_apis``)."""
        raise self.not_supported(f"native {api} requests")

    def native_stream(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> FrameStream:
        """The upstream's stream for ``body`` (as :meth:`native` sends it), its events
        passed through (``api`` in ``capabilities.native_apis``)."""
        raise self.not_supported(f"native {api} requests")

    async def count_native_tokens(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> int:
        """The upstream's own count of the prompt tokens of ``body``
        (``api`` in ``capabilities.native_apis``)."""
        raise self.not_supported(f"native {api} requests")

    async def export_kv(self, link: str) -> tuple[KvHeader, AsyncIterator[bytes]]:
        """The KV state of a sequence holding the prefix link ``link``: its header and its
        bytes, in chunks (``capabilities.kv_move``). 404 ``kv_not_found`` when no sequence
        holds it; 409 ``kv_busy`` when only a running one does."""
        raise self.not_supported("KV moves")

    async def import_kv(self, header: KvHeader, chunks: AsyncIterator[bytes]) -> KvImported:
        """Take a state :meth:`export_kv` gave (elsewhere) into a free sequence, whose
        prefix cache then holds ``header.tokens`` (``capabilities.kv_move``). 409
        ``kv_mismatch`` for another engine's fingerprint, 413 past the size bound, 503
        with ``retry-after`` when no sequence is free; a stream that ends early or fails
        leaves no sequence changed."""
        raise self.not_supported("KV moves")

    async def health(self, timeout_s: float) -> bool | None:
        """Whether it is up: ``True`` up, ``False`` down, ``None`` cannot tell. Probed in
        the background while its breaker is open, so it must be cheap. By default the
        backend's own state (up unless stalled); remote backends ask their upstream."""
        return not self.stats().stalled

    def not_supported(self, what: str) -> NotSupportedError:
        """The error for an optional ability this deployment lacks."""
        return NotSupportedError(f"deployment {self.name!r} does not serve {what}")
