"""In-process llama.cpp backend (llama-cpp-python), for CPU, Metal and CUDA builds.

Its settings live in :mod:`~backends.llamacpp.settings`; what it reads from a request for
the engine's job, and from the job's end for the answer, in :mod:`~backends.llamacpp.jobs`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from backends.base import Backend, Capabilities, LiveStats, continues_final
from backends.kv import KvHeader, KvImported
from backends.llamacpp.continued import UNFINISHED
from backends.llamacpp.embed import EmbeddingModel
from backends.llamacpp.engine import LlamaEngine, LoadedModel
from backends.llamacpp.jobs import (
    MAX_TOP_LOGPROBS,
    chat_top_logprobs,
    extra_sampling,
    finish_reason,
    prompt_text,
    reject_unsupported,
    start_of_text,
    usage_of,
)
from backends.llamacpp.kvmove import KvMover
from backends.llamacpp.sampling import (
    Event,
    Finished,
    GenerationJob,
    Sampling,
    TokenLogprob,
    chat_logprobs,
    completion_logprobs,
)
from backends.llamacpp.settings import LlamaCppSettings, auto_gpu_layers, find_model
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
from gateway.errors import ContextLengthExceededError, InvalidRequestError
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
    new_id,
    now,
)
from gateway.protocol.parts import unread_part
from gateway.protocol.prefix import describe_prefix


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
        self._kv: KvMover | None = None

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
            kv_move=True,
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

    # KV moves (``kvmove.py``) -----------------------------------------------------------

    async def export_kv(self, link: str) -> tuple[KvHeader, AsyncIterator[bytes]]:
        self._generating()
        return await self._mover().export(link)

    async def import_kv(self, header: KvHeader, chunks: AsyncIterator[bytes]) -> KvImported:
        self._generating()
        return await self._mover().load(header, chunks)

    def _mover(self) -> KvMover:
        if self._kv is None:
            self._kv = KvMover(self.engine, self._settings)
        return self._kv

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
            finish_reason=finish_reason(finished, called),
            # every generated token, a call's raw text too (as vLLM reports them): what a
            # cascade judges a call on
            logprobs=chat_logprobs(logprobs) if request.logprobs else None,
        )
        return ChatCompletion(model=request.model, choices=[choice], usage=usage_of(finished))

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
                    yield chunk(ChoiceDelta(), finish_reason(event, called))
                    yield ChatCompletionChunk(
                        id=chunk_id,
                        created=created,
                        model=request.model,
                        choices=[],
                        usage=usage_of(event),
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
        reject_unsupported(n=request.n)
        top_logprobs = chat_top_logprobs(request)
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
            text = prompt_text(request) + text
        logprobs = completion_logprobs(items, 0) if request.logprobs is not None else None
        choice = CompletionChoice(
            text=text, finish_reason=finish_reason(finished, False), logprobs=logprobs
        )
        return Completion(model=request.model, choices=[choice], usage=usage_of(finished))

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

        echo = prompt_text(request) if request.echo else None
        async with aclosing(self._events(job)) as events:
            async for event in events:
                if echo is not None:
                    yield chunk(echo)
                    echo = None
                if isinstance(event, TokenLogprob):
                    pending.append(event)
                elif isinstance(event, Finished):
                    yield chunk("", finish_reason(event, False))
                    yield Completion(
                        id=chunk_id,
                        created=created,
                        model=request.model,
                        choices=[],
                        usage=usage_of(event),
                    )
                elif isinstance(event, str):
                    yield chunk(event)

    def _completion_job(self, request: CompletionRequest) -> GenerationJob:
        self._generating()
        reject_unsupported(n=request.n)
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
        tokens = self._tokenize(prompt_text(request), special=False, param="prompt")
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
            **extra_sampling(request.model_extra or {}),
        )
        return GenerationJob(tokens, limit, sampling, stops, grammar, grammar_param)


# the content parts it reads: a chat template renders text (no image encoder is loaded)
_PART_KINDS = frozenset({"text"})


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
