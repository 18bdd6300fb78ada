"""In-process llama.cpp backend (llama-cpp-python), for CPU, Metal and CUDA builds."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from backends.base import Backend, Capabilities, DeploymentSettings, LiveStats, continues_final
from backends.llamacpp.batch import BatchSettings
from backends.llamacpp.continued import UNFINISHED
from backends.llamacpp.embed import EmbeddingModel, Pooling
from backends.llamacpp.engine import LlamaEngine, LoadedModel
from backends.llamacpp.sampling import (
    Event,
    Finished,
    GenerationJob,
    Sampling,
    TokenLogprob,
    chat_logprobs,
    completion_logprobs,
)
from backends.llamacpp.text import CHATML_TEMPLATE, ChatTemplate
from backends.llamacpp.tool_parsers import ParserName, detect_parser, markers
from backends.llamacpp.tool_prompt import ToolPrompt
from backends.llamacpp.tools import (
    CallIds,
    ToolPlan,
    chat_grammar,
    plan_tools,
    stream_deltas,
    tool_reader,
    whole_message,
)
from gateway.common.durations import UNIT_SECONDS, split_duration
from gateway.errors import ContextLengthExceededError, InvalidRequestError
from gateway.models.store import resolve_model_path
from gateway.planner import (
    Device,
    MemoryPlan,
    ModelSize,
    discover_devices,
    plan_memory,
    shape_from_gguf,
    size_of_shape,
)
from gateway.protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChoiceDelta,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResponse,
    Usage,
    new_id,
    now,
)
from gateway.protocol.parts import unread_part
from gateway.protocol.prefix import describe_prefix


def _seconds(value: Any) -> Any:
    """A duration as seconds: a number, or a string such as ``500ms``, ``30s``, ``5m``, ``1h``."""
    if isinstance(value, bool):
        raise ValueError("give a duration (seconds, or e.g. 30s, 5m, 1h), not true/false")
    if not isinstance(value, str):
        return value
    parsed = split_duration(value)
    if parsed is None:
        raise ValueError(f"{value!r} is not a duration: give seconds, or e.g. 30s, 5m, 1h")
    number, unit = parsed
    return number * UNIT_SECONDS[unit or "s"]


Seconds = Annotated[float, BeforeValidator(_seconds), Field(ge=0)]


class LlamaCppSettings(DeploymentSettings):
    """A GGUF model served in this process. ``model`` is a model-cache name (what
    ``shunter pull`` stored), a path, or ``demo:tiny`` / ``demo:bench`` for a generated
    random-weight model kept in the model cache.

    All ``parallel`` sequences decode together in one llama.cpp context of
    ``parallel * n_ctx`` tokens (continuous batching, see ``backends/llamacpp/batch.py``).
    """

    backend: Literal["llamacpp"]
    n_ctx: int = Field(default=4096, ge=64, description="context length per slot")
    parallel: int = Field(default=1, ge=1, le=64, description="concurrent sequences")
    threads: int | None = Field(default=None, ge=1, description="default: every CPU core")
    gpu_layers: Annotated[int, Field(ge=-1)] | Literal["auto"] = Field(
        default=0, description="-1 offloads every layer; auto: as many as the memory plan fits"
    )
    kv_cache_type: Literal["f16", "q8_0"] = "f16"
    flash_attn: bool | Literal["auto"] = Field(
        default="auto", description="auto: on where the device supports it (llama.cpp's default)"
    )
    n_batch: int = Field(default=512, ge=8, description="tokens per decode step (prefill chunk)")
    prefix_cache: bool = Field(default=True, description="reuse KV of shared prompt prefixes")
    max_queue: int = Field(default=64, ge=0, description="requests waiting for a slot")
    default_max_tokens: int = Field(default=512, ge=1)
    chat_template: str | None = None
    tool_call_parser: ParserName | None = Field(
        default=None,
        description=(
            "how tool calls are read from the output with tool_choice auto: hermes, "
            "llama3_json or mistral; default: the convention the chat template shows "
            "(hermes when it shows none)"
        ),
    )
    task: Literal["generate", "embed"] = Field(
        default="generate",
        description="embed: serve /v1/embeddings from an embedding model (pooled, normalised)",
    )
    pooling: Pooling = Field(default="mean", description="how task: embed pools token vectors")
    preload: bool = Field(default=True, description="load at gateway start; false: on first use")
    keep_alive: Seconds | None = Field(
        default=None, description="unload after this long idle (seconds or 30s/5m/1h); none: never"
    )
    stall_timeout_s: Annotated[Seconds, Field(gt=0)] | None = Field(
        default=60.0,
        description=(
            "with work pending and no decode step done for this long, the engine is stalled: "
            "its requests fail with 503 engine_stalled and readiness turns 503 until it moves "
            "again; keep it above the longest decode step (an n_batch prefill chunk); none: off"
        ),
    )

    @model_validator(mode="after")
    def _quantized_kv_needs_flash_attn(self) -> LlamaCppSettings:
        if self.kv_cache_type != "f16" and self.flash_attn is False:
            raise ValueError("kv_cache_type q8_0 needs flash_attn (llama.cpp's V cache)")
        return self

    def memory_plan(self, devices: Mapping[str, Device]) -> MemoryPlan | str:
        device = self._device(devices)
        if device is None:
            return f"device {self.device!r} not found"
        try:
            shape = shape_from_gguf(resolve_model_path(self.model))
        except (OSError, ValueError) as exc:
            return f"cannot read model: {exc}"
        embed = self.task == "embed"  # one sequence at a time, f16 KV (embed.py)
        return plan_memory(
            shape,
            device,
            context=self.n_ctx,
            slots=1 if embed else self.parallel,
            kv_dtype="f16" if embed else self.kv_cache_type,
            allow_offload=self.gpu_layers != 0 and device.kind != "cpu",
        )

    def file_size(self) -> ModelSize | None:
        """The parameters the GGUF's tensors hold (reads its header only)."""
        return size_of_shape(shape_from_gguf(resolve_model_path(self.model)))

    def returns_logprobs(self) -> bool:
        """Text generation computes them from the raw logits when asked."""
        return self.task == "generate"

    def _device(self, devices: Mapping[str, Device]) -> Device | None:
        """The named device; without a name host RAM when no layer is offloaded, else the
        first GPU found (then host RAM)."""
        if self.device is not None:
            return devices.get(self.device)
        wanted = ("cpu",) if self.gpu_layers == 0 else ("cuda", "metal", "cpu")
        for kind in wanted:
            for device in devices.values():
                if device.kind == kind:
                    return device
        return None

    def batch_settings(self) -> BatchSettings:
        return BatchSettings(
            parallel=self.parallel,
            n_ctx_per_slot=self.n_ctx,
            n_batch=self.n_batch,
            threads=self.threads or os.cpu_count() or 1,
            kv_cache_type=self.kv_cache_type,
            flash_attn=self.flash_attn,
            prefix_cache=self.prefix_cache,
        )


async def find_model(settings: LlamaCppSettings) -> Path:
    """The deployment's GGUF (see :func:`resolve_model_path`); a missing one names it."""
    try:
        return await asyncio.to_thread(resolve_model_path, settings.model)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"deployment {settings.name!r}: {exc}") from None


def auto_gpu_layers(settings: LlamaCppSettings) -> int:
    """``gpu_layers: auto``: every layer when the memory plan fits the GPU (or only the KV
    spills), the planner's layer count on partial offload, none without a GPU."""
    plan = settings.memory_plan({d.name: d for d in discover_devices()})
    if isinstance(plan, str) or plan.device == "cpu" or plan.fit == "does_not_fit":
        return 0
    return -1 if plan.fit in ("fits", "kv_spills") else plan.gpu_layers


class LlamaCppBackend(Backend):
    """Serves chat and text completions from one GGUF through :class:`LlamaEngine`."""

    def __init__(self, settings: LlamaCppSettings) -> None:
        self._settings = settings
        self._engine: LlamaEngine | None = None
        self._prompt: ToolPrompt | None = None
        self._parser: ParserName = settings.tool_call_parser or "hermes"
        self._markers: frozenset[int] = frozenset()  # the parser's control-token markers
        self._embedder: EmbeddingModel | None = None
        self._n_ctx = settings.n_ctx
        self._model_file = ""  # the GGUF's path, once started

    @property
    def name(self) -> str:
        return self._settings.name

    @property
    def capabilities(self) -> Capabilities:
        if self._settings.task == "embed":
            return Capabilities(
                chat=False,
                completions=False,
                embeddings=True,
                context_length=self._n_ctx,
                count_tokens=True,
            )
        return Capabilities(
            tools=True,
            json_schema=True,
            content_parts=_PART_KINDS,
            context_length=self._n_ctx,
            count_tokens=True,
            messages_drop=frozenset(self._settings.messages_drop),
            clamp_output=self._settings.clamp_output,
        )

    @property
    def engine(self) -> LlamaEngine:
        assert self._engine is not None, "backend used before start()"
        return self._engine

    async def start(self) -> None:
        settings = self._settings
        path = await find_model(settings)
        gpu_layers: int = (
            await asyncio.to_thread(auto_gpu_layers, settings)
            if settings.gpu_layers == "auto"
            else settings.gpu_layers
        )
        if settings.task == "embed":
            embedder = EmbeddingModel(
                path,
                n_ctx=settings.n_ctx,
                threads=settings.threads or os.cpu_count() or 1,
                gpu_layers=gpu_layers,
                pooling=settings.pooling,
            )
            await embedder.start()
            self._embedder = embedder
            return
        engine = LlamaEngine(
            path,
            settings.batch_settings(),
            gpu_layers=gpu_layers,
            max_queue=settings.max_queue,
            stall_timeout_s=settings.stall_timeout_s,
            name=settings.name,
        )
        await engine.start()
        self._engine = engine
        self._model_file = str(path)
        self._n_ctx = engine.n_ctx_per_slot
        model = engine.model
        source = settings.chat_template or model.metadata.get("tokenizer.chat_template")
        source = source or CHATML_TEMPLATE
        template = ChatTemplate(
            source,
            bos_token=_token_text(model, model.bos),
            eos_token=_token_text(model, model.eos),
        )
        self._parser = settings.tool_call_parser or detect_parser(source)
        self._prompt = ToolPrompt(template, self._parser)
        self._markers = _control_tokens(model, markers(self._parser))

    def stats(self) -> LiveStats:
        if self._engine is None:
            return LiveStats(slots_busy=0, slots_total=self._settings.parallel)
        return self._engine.stats()

    async def aclose(self) -> None:
        if self._engine is not None:
            await self._engine.aclose()
        if self._embedder is not None:
            await self._embedder.aclose()

    async def embeddings(self, request: EmbeddingRequest) -> EmbeddingResponse:
        """``POST /v1/embeddings`` for ``task: embed`` deployments."""
        if self._embedder is None:
            raise InvalidRequestError(
                f"deployment {self.name!r} generates text; embeddings need `task: embed`",
                param="model",
            )
        return await self._embedder.embed(request, request.model)

    def _generating(self) -> None:
        if self._settings.task == "embed":
            raise InvalidRequestError(
                f"deployment {self.name!r} serves embeddings only; use /v1/embeddings",
                param="model",
            )

    # chat -----------------------------------------------------------------------------

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        plan = plan_tools(request)
        reader = tool_reader(plan, request, self._parser)
        text, finished, logprobs = await self._collect(self._chat_job(request, plan))
        if reader is None:
            message = AssistantMessage(content=text)
        else:
            message = whole_message([*reader.feed(text), *reader.finish()])
        called = bool(message.tool_calls)
        choice = Choice(
            message=message,
            finish_reason=_finish(finished, called),
            # every generated token, a call's raw text too (as vLLM reports them): what a
            # cascade judges a call on
            logprobs=chat_logprobs(logprobs) if request.logprobs else None,
        )
        return ChatCompletion(model=request.model, choices=[choice], usage=_usage(finished))

    async def chat_stream(
        self, request: ChatCompletionRequest
    ) -> AsyncIterator[ChatCompletionChunk]:
        plan = plan_tools(request)
        reader = tool_reader(plan, request, self._parser)
        job = self._chat_job(request, plan)
        chunk_id, created = new_id("chatcmpl"), now()
        ids = CallIds()
        called = False

        pending: list[TokenLogprob] = []  # for the next text chunk

        def chunk(delta: ChoiceDelta, finish: Any = None) -> ChatCompletionChunk:
            # every generated token, a call's raw text too (as in the whole answer)
            logprobs = chat_logprobs(pending) if pending else None
            pending.clear()
            choice = ChunkChoice(delta=delta, finish_reason=finish, logprobs=logprobs)
            return ChatCompletionChunk(
                id=chunk_id, created=created, model=request.model, choices=[choice]
            )

        def deltas(text: str | None) -> list[ChoiceDelta]:
            nonlocal called
            if reader is None:
                return [ChoiceDelta(content=text)] if text is not None else []
            out = stream_deltas(reader.feed(text) if text is not None else reader.finish(), ids)
            called = called or any(d.tool_calls for d in out)
            return out

        first: ChoiceDelta | None = ChoiceDelta(
            role="assistant", content=None if plan.forced else ""
        )
        async with aclosing(self._unfinished_noted(job)) as events:
            async for event in events:
                if first is not None:  # sent once the job runs: queue-full is an HTTP 503
                    yield chunk(first)
                    first = None
                if isinstance(event, TokenLogprob):
                    pending.append(event)
                elif isinstance(event, Finished):
                    for delta in deltas(None):
                        yield chunk(delta)
                    yield chunk(ChoiceDelta(), _finish(event, called))
                    yield ChatCompletionChunk(
                        id=chunk_id,
                        created=created,
                        model=request.model,
                        choices=[],
                        usage=_usage(event),
                    )
                else:
                    for delta in deltas(event):
                        yield chunk(delta)

    async def count_tokens(self, request: ChatCompletionRequest) -> int:
        """The prompt tokens of a chat request, exactly as :meth:`chat` would send them: its
        messages and tools through the model's chat template, then its tokenizer."""
        self._generating()
        # off the event loop: a large prompt takes seconds to render and tokenize
        return await asyncio.to_thread(self._count_prompt_tokens, request)

    def _count_prompt_tokens(self, request: ChatCompletionRequest) -> int:
        plan = plan_tools(request)
        assert self._prompt is not None, "backend used before start()"
        prompt = self._prompt.render(request.messages, plan.offered(), plan.parallel)
        model = self.engine.model
        return len(model.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))

    def _chat_tokens(self, request: ChatCompletionRequest, plan: ToolPlan) -> list[int]:
        """The prompt's tokens. A request that continues its last (assistant) message gets
        the messages before it, the assistant turn opened, then that message's text left
        open: the tokens an unfinished answer was generated as when this process noted
        them (:mod:`backends.llamacpp.continued`), else the text tokenized as plain text."""
        assert self._prompt is not None, "backend used before start()"
        continued = continues_final(request)
        messages = request.messages[:-1] if continued else request.messages
        prompt = self._prompt.render(messages, plan.offered(), plan.parallel)
        tokens = self._tokenize(prompt, special=True, param="messages")
        if not continued:
            return tokens
        model = self.engine.model
        text = request.messages[-1].text().encode("utf-8")
        tail = UNFINISHED.tokens(self._model_file, tokens, text, model.token_to_piece)
        if tail is None:
            tail = model.tokenize(text, add_bos=False, special=False)
        tokens = tokens + tail
        if len(tokens) >= self._n_ctx:
            raise ContextLengthExceededError(
                f"This model's maximum context length is {self._n_ctx} tokens. "
                f"However, your messages resulted in {len(tokens)} tokens.",
                param="messages",
            )
        return tokens

    def _chat_job(self, request: ChatCompletionRequest, plan: ToolPlan) -> GenerationJob:
        self._generating()
        _reject_unsupported(n=request.n)
        top_logprobs = _top_logprobs(request)
        outside = request.first_part(_PART_KINDS, among=False)
        if outside is not None:  # routing sends none here; a direct call may
            field, kind = outside
            raise unread_part(kind, field, f"The deployment '{self.name}'")
        tokens = self._chat_tokens(request, plan)
        grammar, param = chat_grammar(plan, request, self._parser)
        job = self._job(
            tokens, request.output_limit(), request, request.stop_list(), grammar, param
        )
        job.top_logprobs = top_logprobs
        job.prefix_chain, job.prefix_shared = describe_prefix(request)
        if plan.mode == "auto":
            job.visible_tokens = self._markers
        return job

    # completions ----------------------------------------------------------------------

    async def completion(self, request: CompletionRequest) -> Completion:
        text, finished, items = await self._collect(self._completion_job(request))
        if request.echo:
            text = _prompt_text(request) + text
        logprobs = completion_logprobs(items, 0) if request.logprobs is not None else None
        choice = CompletionChoice(
            text=text, finish_reason=_finish(finished, False), logprobs=logprobs
        )
        return Completion(model=request.model, choices=[choice], usage=_usage(finished))

    async def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        job = self._completion_job(request)
        chunk_id, created = new_id("cmpl"), now()

        pending: list[TokenLogprob] = []  # for the next text chunk
        offset = 0  # text_offset of the next token

        def chunk(text: str, finish: Any = None) -> Completion:
            nonlocal offset
            logprobs = None
            if pending:
                logprobs = completion_logprobs(pending, offset)
                offset += sum(len(i.piece.decode("utf-8", errors="replace")) for i in pending)
                pending.clear()
            choice = CompletionChoice(text=text, finish_reason=finish, logprobs=logprobs)
            return Completion(id=chunk_id, created=created, model=request.model, choices=[choice])

        echo = _prompt_text(request) if request.echo else None
        async with aclosing(self._events(job)) as events:
            async for event in events:
                if echo is not None:
                    yield chunk(echo)
                    echo = None
                if isinstance(event, TokenLogprob):
                    pending.append(event)
                elif isinstance(event, Finished):
                    yield chunk("", _finish(event, False))
                    yield Completion(
                        id=chunk_id,
                        created=created,
                        model=request.model,
                        choices=[],
                        usage=_usage(event),
                    )
                elif isinstance(event, str):
                    yield chunk(event)

    def _completion_job(self, request: CompletionRequest) -> GenerationJob:
        self._generating()
        _reject_unsupported(n=request.n)
        if request.best_of not in (None, 1):
            raise InvalidRequestError("best_of > 1 is not supported", param="best_of")
        if request.suffix:
            raise InvalidRequestError("suffix (insertion) is not supported", param="suffix")
        top = request.logprobs
        if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
            raise InvalidRequestError(
                f"'logprobs' must be between 0 and {MAX_TOP_LOGPROBS}", param="logprobs"
            )
        if top is not None and request.echo:
            raise InvalidRequestError(
                "logprobs of echoed prompt tokens are not supported", param="echo"
            )
        tokens = self._tokenize(_prompt_text(request), special=False, param="prompt")
        job = self._job(tokens, request.max_tokens, request, request.stop_list(), None)
        job.top_logprobs = top
        return job

    # shared ---------------------------------------------------------------------------

    def _events(self, job: GenerationJob) -> AsyncGenerator[Event, None]:
        return self.engine.run(job)

    async def _unfinished_noted(self, job: GenerationJob) -> AsyncGenerator[Event, None]:
        """The job's events; if it stops short (the engine failed, the stream was closed
        early), the tokens it got are noted for a continuation elsewhere."""
        finished = False
        try:
            async with aclosing(self._events(job)) as events:
                async for event in events:
                    finished = isinstance(event, Finished)
                    yield event
        finally:
            if not finished:
                UNFINISHED.remember(self._model_file, job.prompt_tokens, job.generated)

    async def _collect(self, job: GenerationJob) -> tuple[str, Finished, list[TokenLogprob]]:
        job.stream = False
        text: list[str] = []
        logprobs: list[TokenLogprob] = []
        async with aclosing(self._events(job)) as events:
            async for event in events:
                if isinstance(event, Finished):
                    return "".join(text), event, logprobs
                if isinstance(event, TokenLogprob):
                    logprobs.append(event)
                else:
                    text.append(event)
        raise AssertionError("the engine ended a job without Finished")

    def _tokenize(self, text: str, *, special: bool, param: str) -> list[int]:
        model = self.engine.model
        tokens = model.tokenize(text.encode("utf-8"), add_bos=True, special=special)
        tokens = tokens or start_of_text(model.bos, param)
        if len(tokens) >= self._n_ctx:
            raise ContextLengthExceededError(
                f"This model's maximum context length is {self._n_ctx} tokens. "
                f"However, your messages resulted in {len(tokens)} tokens.",
                param=param,
            )
        return tokens

    def _job(
        self,
        tokens: list[int],
        max_tokens: int | None,
        request: ChatCompletionRequest | CompletionRequest,
        stops: list[str],
        grammar: Any,
        grammar_param: str = "response_format",
    ) -> GenerationJob:
        room = self._n_ctx - len(tokens)
        limit = min(max_tokens or self._settings.default_max_tokens, room)
        temperature = 1.0 if request.temperature is None else request.temperature
        sampling = Sampling(
            temperature=temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            frequency_penalty=request.frequency_penalty or 0.0,
            presence_penalty=request.presence_penalty or 0.0,
            seed=request.seed,
            **_extra_sampling(request.model_extra or {}),
        )
        return GenerationJob(tokens, limit, sampling, stops, grammar, grammar_param)


def start_of_text(bos: int, param: str) -> list[int]:
    """What an empty prompt is generated from: the BOS token alone, as OpenAI's completions
    answer an empty prompt as if from the start of a document. A model without a BOS token
    (``bos`` < 0) has nothing to start from: 400 naming ``param``."""
    if bos < 0:
        raise InvalidRequestError(
            "the prompt is empty and this model has no BOS token to start from", param=param
        )
    return [bos]


def _extra_sampling(extra: dict[str, Any]) -> dict[str, Any]:
    """vLLM-style extra body fields: ``top_k`` (-1 or 0: off), ``min_p``, ``repetition_penalty``
    (alias ``repeat_penalty``)."""
    out: dict[str, Any] = {}
    top_k = extra.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < -1:
            raise InvalidRequestError("top_k must be an integer >= -1", param="top_k")
        out["top_k"] = max(0, top_k)
    min_p = extra.get("min_p")
    if min_p is not None:
        if isinstance(min_p, bool) or not isinstance(min_p, int | float) or not 0 <= min_p <= 1:
            raise InvalidRequestError("min_p must be a number in [0, 1]", param="min_p")
        out["min_p"] = float(min_p)
    for name in ("repetition_penalty", "repeat_penalty"):
        value = extra.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 10:
            raise InvalidRequestError(f"{name} must be a number in (0, 10]", param=name)
        out["repeat_penalty"] = float(value)
    return out


def _usage(finished: Finished) -> Usage:
    return Usage.of(
        finished.prompt_tokens, finished.completion_tokens, cached_tokens=finished.cached_tokens
    )


def _reject_unsupported(*, n: int | None) -> None:
    if n not in (None, 1):
        raise InvalidRequestError("n > 1 is not supported; send separate requests", param="n")


MAX_TOP_LOGPROBS = 20
# the content parts it reads: a chat template renders text (no image encoder is loaded)
_PART_KINDS = frozenset({"text"})


def _top_logprobs(request: ChatCompletionRequest) -> int | None:
    """How many alternatives per token, or ``None`` when the request wants no logprobs."""
    top = request.top_logprobs
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise InvalidRequestError(
            f"'top_logprobs' must be between 0 and {MAX_TOP_LOGPROBS}", param="top_logprobs"
        )
    if not request.logprobs:
        if top is not None:
            raise InvalidRequestError(
                "'top_logprobs' needs 'logprobs' set to true", param="top_logprobs"
            )
        return None
    return top or 0


def _finish(finished: Finished, called: bool) -> Literal["stop", "length", "tool_calls"]:
    if finished.reason == "length":
        return "length"
    return "tool_calls" if called else "stop"


def _prompt_text(request: CompletionRequest) -> str:
    if isinstance(request.prompt, str):
        return request.prompt
    if len(request.prompt) != 1:
        raise InvalidRequestError("send one prompt per request", param="prompt")
    return request.prompt[0]


def _token_text(model: LoadedModel, token: int) -> str:
    if token < 0:
        return ""
    return model.detokenize([token], special=True).decode("utf-8", errors="replace")


def _control_tokens(model: LoadedModel, texts: tuple[str, ...]) -> frozenset[int]:
    """The tokens among ``texts`` that are single control tokens, which the text of an answer
    leaves out unless asked (see ``GenerationJob.visible_tokens``)."""
    found: set[int] = set()
    for text in texts:
        tokens = model.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        if len(tokens) == 1 and not model.detokenize(tokens):
            found.add(tokens[0])
    return frozenset(found)
