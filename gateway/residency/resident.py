"""Local models on demand: load on first use, unload when idle, evict under a memory budget.

Every llama.cpp deployment is served through a :class:`ResidentBackend`, a :class:`Backend`
that holds the engine-backed one and loads it when needed:

* ``preload: true`` (the default) loads at gateway start; ``preload: false`` loads on the
  first request. Concurrent first requests share one load. A failed load answers
  :class:`ModelLoadError` (503: dispatch falls back to the next candidate) and the next
  request tries again.
* ``keep_alive``: a model idle that long is unloaded by a periodic sweep (its engine is
  closed, its memory released); ``None`` keeps it until it is evicted or the gateway stops.
* ``local_models.memory_budget``: before a load, the least recently used idle models are
  unloaded until every loaded model fits the budget, sized by the memory plan (weights +
  KV + overhead, as ``shunter plan`` shows). Models with requests in flight (a stream
  counts until it is closed) are never evicted; when they leave no room, the request gets
  a :class:`ModelLoadError` that says so.

Whether a model is in memory shows as ``loaded`` in its live figures (``/health/readiness``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Literal, TypeVar

import structlog

from backends.base import Backend, LiveStats
from backends.kv import KvHeader, KvImported, kv_not_found
from backends.llamacpp.settings import LlamaCppSettings, find_model
from backends.registry import DeploymentConfig, create_backend
from backends.wrapper import WrapperBackend
from gateway.common.periodic import Periodic
from gateway.config import DeviceSpec, LocalModelsSettings
from gateway.errors import ServiceUnavailableError
from gateway.planner.devices import gib
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResponse,
)
from gateway.residency.eviction import CannotFitError, LoadedModel, choose_evictions
from gateway.residency.placement import plan_deployments

T = TypeVar("T")
State = Literal["unloaded", "loading", "loaded"]
log = structlog.get_logger("shunter.residency")


class ModelLoadError(ServiceUnavailableError):
    """A local model cannot be loaded now: its load failed (code ``model_load_failed``), or
    models in use leave no room under the memory budget (``model_cannot_fit``)."""

    default_code = "model_load_failed"


class Residency:
    """The llama.cpp deployments of one gateway: which are loaded, and the budget they share."""

    def __init__(
        self,
        settings: LocalModelsSettings | None = None,
        devices: Sequence[DeviceSpec] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or LocalModelsSettings()
        self.devices = list(devices)
        self.clock = clock
        self._residents: dict[str, ResidentBackend] = {}
        self._serial = itertools.count()
        self._deciding = asyncio.Lock()
        self._sweeper = Periodic(1.0, self.sweep)
        self._started = False

    def create(self, settings: DeploymentConfig) -> Backend:
        """The backend for one deployment; llama.cpp ones load and unload through here."""
        if not isinstance(settings, LlamaCppSettings):
            return create_backend(settings)
        resident = ResidentBackend(settings, self, f"{settings.name}#{next(self._serial)}")
        self._residents[resident.key] = resident
        self._sweeper.interval_s = self._interval()
        return resident

    def configure(self, settings: LocalModelsSettings, devices: Sequence[DeviceSpec]) -> None:
        """A reloaded config's budget and devices (a lower budget is enforced by the sweep)."""
        self.settings, self.devices = settings, list(devices)

    def start(self) -> None:
        """Start the idle sweep (when there are local models to sweep)."""
        if self._residents and not self._started:
            self._started = True
            self._sweeper.start()

    async def stop(self) -> None:
        await self._sweeper.stop()

    def forget(self, resident: ResidentBackend) -> None:
        self._residents.pop(resident.key, None)

    async def load(self, resident: ResidentBackend) -> None:
        """Make room for ``resident`` under the budget (unloading LRU idle models), load it."""
        async with self._deciding:  # one eviction decision at a time; loads then run together
            need = await resident.size_bytes(self.devices)
            victims = self._make_room(resident, need)
            resident.state = "loading"
            await _close(victims)
        await resident.load_now()

    async def sweep(self) -> None:
        """Unload models idle past their keep-alive, then idle ones over a lowered budget."""
        now = self.clock()
        victims = [
            r.unload_now("idle")
            for r in list(self._residents.values())
            if r.keep_alive is not None and r.idle and now - r.last_used >= r.keep_alive
        ]
        budget = self.settings.memory_budget
        if budget is not None:
            with contextlib.suppress(CannotFitError):  # busy models over budget: wait for them
                victims += self._unload(choose_evictions(self._loaded(), 0, budget), "over budget")
        await _close([v for v in victims if v is not None])

    def _make_room(self, resident: ResidentBackend, need: int) -> list[Backend]:
        budget = self.settings.memory_budget
        if budget is None:
            return []
        try:
            keys = choose_evictions(self._loaded(resident), need, budget)
        except CannotFitError:
            message = self._no_room(resident, need, budget)
            raise ModelLoadError(message, code="model_cannot_fit") from None
        return self._unload(keys, f"evicted for {resident.name}")

    def _unload(self, keys: Sequence[str], reason: str) -> list[Backend]:
        victims = (self._residents[k].unload_now(reason) for k in keys)
        return [v for v in victims if v is not None]

    def _loaded(self, besides: ResidentBackend | None = None) -> list[LoadedModel]:
        return [
            r.as_loaded()
            for r in self._residents.values()
            if r.state != "unloaded" and r is not besides
        ]

    def _no_room(self, resident: ResidentBackend, need: int, budget: int) -> str:
        wanted = f"deployment {resident.name!r} needs about {gib(need)}"
        if need > budget:
            return f"{wanted}, more than the whole local_models memory_budget ({gib(budget)})"
        busy = sorted({r.name for r in self._residents.values() if r.busy and r is not resident})
        return (
            f"{wanted}, and models in use ({', '.join(busy)}) hold the rest of the "
            f"local_models memory_budget ({gib(budget)}); retry when they finish"
        )

    def _interval(self) -> float:
        keep = [r.keep_alive for r in self._residents.values() if r.keep_alive is not None]
        return min(1.0, max(0.05, min(keep) / 4)) if keep else 1.0


class ResidentBackend(WrapperBackend):
    """A llama.cpp deployment that is loaded on demand; see the module docstring. Each
    request it serves loads the engine first; ``inner`` is the engine-backed backend (a
    fresh, unstarted one while unloaded). Its ``capabilities`` and health are the engine's.
    """

    def __init__(self, settings: LlamaCppSettings, residency: Residency, key: str) -> None:
        super().__init__(create_backend(settings))
        self.settings = settings
        self.key = key
        self.keep_alive = settings.keep_alive
        self.state: State = "unloaded"
        self.in_flight = 0
        self.last_used = residency.clock()
        self._residency = residency
        self._loading: asyncio.Task[None] | None = None
        self._size: int | None = None
        self._closed = False

    @property
    def busy(self) -> bool:
        return self.in_flight > 0 or self.state == "loading"

    @property
    def idle(self) -> bool:
        return self.state == "loaded" and self.in_flight == 0

    async def start(self) -> None:
        """Preload, or only check that the model can be found (a typo fails at start)."""
        if self.settings.preload:
            await self._load()
            return
        await find_model(self.settings)

    def stats(self) -> LiveStats:
        stats = self._backend.stats()
        in_flight = max(stats.in_flight, self.in_flight)
        return replace(stats, in_flight=in_flight, loaded=self.state == "loaded")

    async def aclose(self) -> None:
        """Release the model for good (shutdown, or a reload replaced this deployment)."""
        self._closed = True
        self._residency.forget(self)
        if self._loading is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._loading)
        self.state = "unloaded"
        await self._backend.aclose()

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        async with self._use() as backend:
            return await backend.chat(request)

    def chat_stream(self, request: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        return self._relay(lambda backend: backend.chat_stream(request))

    async def completion(self, request: CompletionRequest) -> Completion:
        async with self._use() as backend:
            return await backend.completion(request)

    def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        return self._relay(lambda backend: backend.completion_stream(request))

    async def count_tokens(self, request: ChatCompletionRequest) -> int:
        """The engine's exact prompt token count (the model is loaded for it)."""
        async with self._use() as backend:
            return await backend.count_tokens(request)

    async def embeddings(self, request: EmbeddingRequest) -> EmbeddingResponse:
        async with self._use() as backend:
            return await backend.embeddings(request)

    async def export_kv(self, link: str) -> tuple[KvHeader, AsyncIterator[bytes]]:
        """A loaded engine's sequence; an unloaded model holds none (nothing is loaded)."""
        if self.state != "loaded":
            raise kv_not_found(self.name, link)
        async with self._use() as backend:
            return await backend.export_kv(link)

    async def import_kv(self, header: KvHeader, chunks: AsyncIterator[bytes]) -> KvImported:
        async with self._use() as backend:
            return await backend.import_kv(header, chunks)

    # served only after a load, and the engine has none of them: refused, as by default
    chat_stream_raw = Backend.chat_stream_raw
    native = Backend.native
    native_stream = Backend.native_stream
    count_native_tokens = Backend.count_native_tokens

    # residency ------------------------------------------------------------------------

    def as_loaded(self) -> LoadedModel:
        return LoadedModel(self.key, self._size or 0, self.last_used, self.busy)

    async def size_bytes(self, devices: Sequence[DeviceSpec]) -> int:
        """What the model takes when loaded, by the memory plan (0 when it cannot be planned)."""
        if self._size is None:
            self._size = await asyncio.to_thread(_planned_bytes, self.settings, devices)
        return self._size

    async def load_now(self) -> None:
        """Start the engine (the residency manager has made room)."""
        try:
            await self._backend.start()
        except BaseException:
            self.state, self._size = "unloaded", None  # the file may be fixed before the retry
            failed, self._backend = self._backend, create_backend(self.settings)
            with contextlib.suppress(Exception):
                await failed.aclose()
            raise
        self.state = "loaded"
        log.info("model_loaded", deployment=self.name, model=self.settings.model)

    def unload_now(self, reason: str) -> Backend | None:
        """Take the loaded engine out of service if idle; the caller closes what is returned."""
        if self.state != "loaded" or self.in_flight:
            return None
        loaded, self._backend = self._backend, create_backend(self.settings)
        self.state = "unloaded"
        log.info("model_unloaded", deployment=self.name, reason=reason)
        return loaded

    # requests -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _use(self) -> AsyncIterator[Backend]:
        self.in_flight += 1  # counted before the load: a model being loaded for us stays
        try:
            if self.state != "loaded":
                await self._ensure_loaded()
            yield self._backend
        finally:
            self.in_flight -= 1
            self.last_used = self._residency.clock()

    async def _relay(self, start: Callable[[Backend], AsyncIterator[T]]) -> AsyncIterator[T]:
        async with self._use() as backend:
            items = start(backend)
            try:
                async for item in items:
                    yield item
            finally:
                close = getattr(items, "aclose", None)
                if close is not None:
                    await close()

    async def _ensure_loaded(self) -> None:
        if self._closed:
            raise ModelLoadError(f"deployment {self.name!r} was shut down or replaced")
        try:
            await self._load()
        except ModelLoadError:
            raise
        except Exception as exc:
            # the reason names server paths: the log keeps it, the client gets none of it
            log.warning("model_load_failed", deployment=self.name, error=str(exc))
            raise ModelLoadError(
                f"deployment {self.name!r}: model failed to load; the next request tries again"
            ) from exc

    async def _load(self) -> None:
        """Load, or join the load already under way."""
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._residency.load(self))
            self._loading.add_done_callback(self._load_done)
        await asyncio.shield(self._loading)

    def _load_done(self, task: asyncio.Task[None]) -> None:
        self._loading = None
        if not task.cancelled():
            task.exception()  # seen here, so a load nobody waits for any more is not reported


async def _close(backends: Sequence[Backend]) -> None:
    """Close unloaded engines; one that fails to close is logged, not raised."""
    results = await asyncio.gather(*(b.aclose() for b in backends), return_exceptions=True)
    for backend, result in zip(backends, results, strict=True):
        if isinstance(result, Exception):
            log.warning("model_unload_failed", deployment=backend.name, error=str(result))


def _planned_bytes(settings: LlamaCppSettings, devices: Sequence[DeviceSpec]) -> int:
    (placement,) = plan_deployments([settings], devices)
    return placement.plan.required_bytes if placement.plan is not None else 0
