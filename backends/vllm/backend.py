"""In-process vLLM backend: vLLM's async engine and its own OpenAI serving layer.

Requests go to vLLM's ``OpenAIServingChat`` / ``OpenAIServingCompletion`` inside this
process (no HTTP hop), so tools, ``json_schema``, logprobs and chat templates behave as in
``vllm serve``; replies come back as our protocol models (``backends/vllm/wire.py``).
Engine-facing work stays here: counting requests, aborting the engine request when the
consumer goes away, live figures from a stat logger, idle sleep, draining on close.

vLLM is imported only by :meth:`VLLMBackend.start`, through ``backends/vllm/compat.py``,
the one module that knows its constructors. A test passes ``engine_factory`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from backends.base import Backend, Capabilities, LiveStats
from backends.vllm.compat import build_runtime
from backends.vllm.engine import (
    Activity,
    Endpoint,
    EngineFactory,
    IdleSleeper,
    Reply,
    Runtime,
    StatsRecorder,
    content_parts,
)
from backends.vllm.install import INSTALL_HINT, check_available
from backends.vllm.settings import LoRAAdapter, VLLMSettings
from backends.vllm.startup import VLLMStartError, VLLMUnavailableError, start_error
from backends.vllm.wire import DONE, clean_reply, map_errors, request_body, sse_events
from gateway.errors import ServiceUnavailableError, UpstreamError
from gateway.planner import Device
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
)
from gateway.protocol.frames import DictFramed

__all__ = [
    "INSTALL_HINT",
    "LoRAAdapter",
    "VLLMBackend",
    "VLLMSettings",
    "VLLMStartError",
    "VLLMUnavailableError",
    "check_available",
]

log = logging.getLogger(__name__)

AnyRequest = ChatCompletionRequest | CompletionRequest


class VLLMBackend(Backend):
    """Serves chat and text completions from one vLLM engine in this process."""

    def __init__(
        self,
        settings: VLLMSettings,
        *,
        engine_factory: EngineFactory | None = None,
        device: Device | None = None,
    ) -> None:
        self._settings = settings
        self._factory = engine_factory
        self._device = device
        self._adapters = frozenset(adapter.name for adapter in settings.lora_adapters)
        self._recorder = StatsRecorder()
        self._activity = Activity()
        self._runtime: Runtime | None = None
        self._sleeper: IdleSleeper | None = None
        self._sleeper_task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def name(self) -> str:
        return self._settings.name

    @property
    def capabilities(self) -> Capabilities:
        length = self._runtime.max_model_len if self._runtime else self._settings.max_model_len
        # vLLM 0.32 refuses every tool_choice but "none" without a tool parser
        tools = self._settings.tool_call_parser is not None
        parts = content_parts(self.modalities)
        return Capabilities(
            tools=tools,
            json_schema=True,
            images="image_url" in parts,
            content_parts=parts,
            context_length=length,
            chat_stream_raw=True,
            messages_drop=frozenset(self._settings.messages_drop),
            clamp_output=self._settings.clamp_output,
        )

    @property
    def modalities(self) -> frozenset[str]:
        """What the model reads besides text: as the started engine reports it, else as
        the settings declare it."""
        runtime = self._runtime
        if runtime is not None and runtime.modalities is not None:
            return runtime.modalities
        return frozenset(self._settings.modalities)

    @property
    def sleeping(self) -> bool:
        """Whether the engine sleeps (idle handling); it wakes on the next request."""
        return self._sleeper is not None and self._sleeper.sleeping

    async def start(self) -> None:
        factory = self._factory or _vllm_factory()
        try:
            runtime = await factory(self._settings, self._recorder)
        except Exception as exc:
            raise start_error(self._settings, exc, self._device) from exc
        self._runtime = runtime
        declared = frozenset(self._settings.modalities)
        if runtime.modalities is not None and runtime.modalities != declared:
            log.info(
                "%s: the model reads %s besides text (modalities declared: %s)",
                self.name,
                ", ".join(sorted(runtime.modalities)) or "nothing",
                ", ".join(sorted(declared)) or "none",
            )
        idle_s = self._settings.sleep_after_idle_s
        if idle_s is not None:
            self._sleeper = IdleSleeper(runtime.engine, self._activity, idle_s)
            self._sleeper_task = asyncio.get_running_loop().create_task(self._sleeper.run())

    def stats(self) -> LiveStats:
        runtime = self._runtime
        return self._recorder.snapshot(
            in_flight=self._activity.in_flight,
            slots_total=runtime.max_num_seqs if runtime else self._settings.max_num_seqs,
            kv_tokens=runtime.kv_tokens if runtime else None,
        )

    async def aclose(self) -> None:
        """Refuse new requests, wait up to ``drain_timeout_s`` for those in flight, abort
        the rest, then shut the engine down."""
        if self._closing:
            return
        self._closing = True
        runtime, self._runtime = self._runtime, None
        if runtime is None:
            return
        if not await self._activity.wait_idle(self._settings.drain_timeout_s):
            left = list(self._activity.requests.values())
            log.warning("%s: aborting %d requests after the drain timeout", self.name, len(left))
            for engine_request_id in left:
                await _abort(runtime, engine_request_id)
        if self._sleeper_task is not None:
            self._sleeper_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sleeper_task
        if runtime.close is not None:
            await runtime.close()
        else:
            await asyncio.to_thread(runtime.engine.shutdown)

    # requests -------------------------------------------------------------------------

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        return ChatCompletion.model_validate(await self._whole("chat", request))

    async def chat_stream(
        self, request: ChatCompletionRequest
    ) -> AsyncIterator[ChatCompletionChunk]:
        async with aclosing(self._stream("chat", request)) as events:
            async for data in events:
                yield ChatCompletionChunk.model_validate(data)

    def chat_stream_raw(self, request: ChatCompletionRequest) -> DictFramed:
        """The chat stream as SSE frames, each chunk written as vLLM made it (after
        :func:`clean_reply`), without validating it into a model first."""
        return DictFramed(self._stream("chat", request), self.name)

    async def completion(self, request: CompletionRequest) -> Completion:
        return Completion.model_validate(await self._whole("completion", request))

    async def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        async with aclosing(self._stream("completion", request)) as events:
            async for data in events:
                yield Completion.model_validate(data)

    async def _whole(self, endpoint: Endpoint, request: AnyRequest) -> dict[str, Any]:
        call = self._call(endpoint, request, stream=False)
        completed = False
        try:
            reply = await call.send()
            with call.errors():
                if not isinstance(reply, dict):
                    await _close(reply)
                    raise UpstreamError("vLLM streamed a reply to a non-streaming request")
                data = clean_reply(reply, request.model)
            completed = True
            return data
        finally:
            await call.finish(completed)

    async def _stream(
        self, endpoint: Endpoint, request: AnyRequest
    ) -> AsyncGenerator[dict[str, Any], None]:
        # explicit try/finally, no context manager around the yields: at loop shutdown
        # asyncio closes abandoned generators in any order
        call = self._call(endpoint, request, stream=True)
        completed = False
        try:
            reply = await call.send()
            if isinstance(reply, dict):  # vLLM refused it before streaming
                with call.errors():
                    clean_reply(reply, request.model)
                raise UpstreamError("vLLM answered a streaming request with one reply")
            usage = False
            try:
                async for frame in reply:
                    with call.errors():
                        events = list(sse_events(frame))
                        chunks = [
                            clean_reply(e, request.model) for e in events if isinstance(e, dict)
                        ]
                    for chunk in chunks:
                        usage = not chunk.get("choices") and chunk.get("usage") is not None
                        yield chunk
                    if DONE in events:
                        break
            finally:
                await _close(reply)
            if not usage:
                raise UpstreamError("vLLM's stream ended without its usage chunk")
            completed = True
        finally:
            await call.finish(completed)

    def _call(self, endpoint: Endpoint, request: AnyRequest, *, stream: bool) -> _Call:
        if self._closing:
            raise ServiceUnavailableError(f"deployment {self.name!r} is shutting down")
        runtime = self._ready()
        model = request.model if request.model in self._adapters else self._settings.model
        return _Call(
            self._activity, self._sleeper, runtime, endpoint, request, model=model, stream=stream
        )

    def _ready(self) -> Runtime:
        if self._runtime is None:
            raise ServiceUnavailableError(f"deployment {self.name!r} is not started")
        return self._runtime


class _Call:
    """One request to vLLM's serving layer. It counts as in flight from ``send`` to
    ``finish``; unless it completed (error, cancel, consumer gone), ``finish`` aborts the
    engine request, freeing its KV now rather than when vLLM's generator is collected."""

    def __init__(
        self,
        activity: Activity,
        sleeper: IdleSleeper | None,
        runtime: Runtime,
        endpoint: Endpoint,
        request: AnyRequest,
        *,
        model: str,
        stream: bool,
    ) -> None:
        self._activity = activity
        self._sleeper = sleeper
        self._runtime = runtime
        self._endpoint = endpoint
        self.request_id = uuid.uuid4().hex
        self.engine_request_id = runtime.frontend.engine_request_id(endpoint, self.request_id)
        self._body = request_body(request, model=model, request_id=self.request_id, stream=stream)

    def errors(self) -> contextlib.AbstractContextManager[None]:
        param = "messages" if self._endpoint == "chat" else "prompt"
        return map_errors(lambda: self._runtime.engine.errored, param)

    async def send(self) -> Reply:
        self._activity.begin(self.request_id, self.engine_request_id)
        if self._sleeper is not None:
            try:
                await self._sleeper.ensure_awake()
            except Exception as exc:
                raise ServiceUnavailableError(f"could not wake the vLLM engine: {exc}") from exc
        frontend = self._runtime.frontend
        send = frontend.chat if self._endpoint == "chat" else frontend.completion
        return await send(self._body)

    async def finish(self, completed: bool) -> None:
        if not completed:
            await _abort(self._runtime, self.engine_request_id)
        self._activity.end(self.request_id)


def _vllm_factory() -> EngineFactory:
    problem = check_available()
    if problem is not None:
        raise VLLMUnavailableError(problem)
    return build_runtime


async def _abort(runtime: Runtime, engine_request_id: str) -> None:
    """Free the request's KV now (vLLM would only abort it once its generator is collected)."""
    try:
        await runtime.engine.abort(engine_request_id)
    except Exception:  # engine already gone: nothing left to free
        log.debug("abort of %s failed", engine_request_id, exc_info=True)


async def _close(reply: Reply) -> None:
    aclose = getattr(reply, "aclose", None)
    if aclose is not None:
        await aclose()
