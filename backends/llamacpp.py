"""In-process llama.cpp backend (llama-cpp-python), for CPU, Metal and CUDA builds."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from backends.base import Capabilities, DeploymentSettings, LiveStats
from backends.llamacpp_engine import Finished, GenerationJob, LlamaEngine, Sampling
from backends.llamacpp_text import CHATML_TEMPLATE, ChatTemplate
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
    ToolCall,
    ToolCallDelta,
    Usage,
    new_id,
    now,
)
from gateway.protocol.chat import FunctionCall

DEMO_PREFIX = "demo:"


class LlamaCppSettings(DeploymentSettings):
    """A GGUF model served in this process. ``model`` is a path, or ``demo:tiny`` /
    ``demo:bench`` for a generated random-weight model kept in the model cache."""

    backend: Literal["llamacpp"]
    n_ctx: int = Field(default=4096, ge=64, description="context length per slot")
    parallel: int = Field(default=1, ge=1, le=64, description="concurrent sequences")
    threads: int | None = Field(default=None, ge=1)
    gpu_layers: int = Field(default=0, ge=-1, description="-1 offloads every layer")
    kv_cache_type: Literal["f16", "q8_0"] = "f16"
    flash_attn: bool = False
    max_queue: int = Field(default=64, ge=0, description="requests waiting for a slot")
    default_max_tokens: int = Field(default=512, ge=1)
    chat_template: str | None = None


def resolve_model_path(model: str) -> Path:
    """A GGUF path; ``demo:SIZE`` is generated into the model cache on first use."""
    if model.startswith(DEMO_PREFIX):
        from gateway.demo_model import ensure_demo_model

        size = model.removeprefix(DEMO_PREFIX)
        if size not in ("tiny", "bench"):
            raise ValueError(f"unknown demo model {model!r}: use demo:tiny or demo:bench")
        return ensure_demo_model(model_cache_dir() / f"demo-{size}.gguf", size)  # type: ignore[arg-type]
    return Path(model).expanduser()


def model_cache_dir() -> Path:
    base = os.environ.get("SWITCHYARD_MODEL_DIR")
    if base:
        return Path(base).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "switchyard" / "models"


class LlamaCppBackend:
    """Serves chat and text completions from one GGUF through :class:`LlamaEngine`."""

    def __init__(self, settings: LlamaCppSettings) -> None:
        self._settings = settings
        self._engine = LlamaEngine(self._load, settings.parallel, settings.max_queue)
        self._template: ChatTemplate | None = None
        self._n_ctx = settings.n_ctx

    @property
    def name(self) -> str:
        return self._settings.name

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(tools=True, json_schema=True, context_length=self._n_ctx)

    async def start(self) -> None:
        await self._engine.start()
        llama = self._engine.first
        self._n_ctx = llama.n_ctx()
        meta: dict[str, str] = llama.metadata
        source = self._settings.chat_template or meta.get("tokenizer.chat_template")
        vocab = llama._model
        self._template = ChatTemplate(
            source or CHATML_TEMPLATE,
            bos_token=_token_text(llama, vocab.token_bos()),
            eos_token=_token_text(llama, vocab.token_eos()),
        )

    def _load(self, index: int) -> Any:
        import llama_cpp

        settings = self._settings
        path = resolve_model_path(settings.model)
        if not path.is_file():
            raise FileNotFoundError(f"deployment {settings.name!r}: no GGUF file at {path}")
        threads = settings.threads or max(1, (os.cpu_count() or 1) // settings.parallel)
        kv_type = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}
        return llama_cpp.Llama(
            model_path=str(path),
            n_ctx=settings.n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_gpu_layers=settings.gpu_layers,
            flash_attn=settings.flash_attn,
            type_k=kv_type[settings.kv_cache_type],
            type_v=kv_type[settings.kv_cache_type],
            seed=index,
            verbose=False,
        )

    def stats(self) -> LiveStats:
        return self._engine.stats()

    async def aclose(self) -> None:
        await self._engine.aclose()

    # chat -----------------------------------------------------------------------------

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        tool = _forced_tool(request)
        job = self._chat_job(request, tool)
        text: list[str] = []
        finished: Finished | None = None
        async for event in self._engine.run(job):
            if isinstance(event, Finished):
                finished = event
            else:
                text.append(event)
        assert finished is not None
        content = "".join(text)
        if tool is not None:
            call = ToolCall(id=new_id("call"), function=FunctionCall(name=tool, arguments=content))
            message = AssistantMessage(content=None, tool_calls=[call])
        else:
            message = AssistantMessage(content=content)
        return ChatCompletion(
            model=request.model,
            choices=[Choice(message=message, finish_reason=_finish(finished, tool))],
            usage=Usage.of(finished.prompt_tokens, finished.completion_tokens),
        )

    async def chat_stream(
        self, request: ChatCompletionRequest
    ) -> AsyncIterator[ChatCompletionChunk]:
        tool = _forced_tool(request)
        job = self._chat_job(request, tool)
        chunk_id, created = new_id("chatcmpl"), now()

        def chunk(delta: ChoiceDelta, finish: Any = None) -> ChatCompletionChunk:
            choice = ChunkChoice(delta=delta, finish_reason=finish)
            return ChatCompletionChunk(
                id=chunk_id, created=created, model=request.model, choices=[choice]
            )

        first = ChoiceDelta(role="assistant", content=None if tool else "")
        if tool is not None:
            first.tool_calls = [
                ToolCallDelta(
                    index=0,
                    id=new_id("call"),
                    type="function",
                    function={"name": tool, "arguments": ""},
                )
            ]
        yield chunk(first)
        async for event in self._engine.run(job):
            if isinstance(event, Finished):
                yield chunk(ChoiceDelta(), _finish(event, tool))
                usage = Usage.of(event.prompt_tokens, event.completion_tokens)
                yield ChatCompletionChunk(
                    id=chunk_id, created=created, model=request.model, choices=[], usage=usage
                )
            elif tool is not None:
                args = ToolCallDelta(index=0, function={"arguments": event})
                yield chunk(ChoiceDelta(tool_calls=[args]))
            else:
                yield chunk(ChoiceDelta(content=event))

    def _chat_job(self, request: ChatCompletionRequest, tool: str | None) -> GenerationJob:
        _reject_unsupported(n=request.n, logprobs=bool(request.logprobs))
        if any(m.has_images() for m in request.messages):
            raise InvalidRequestError(
                f"deployment {self.name!r} does not accept images", param="messages"
            )
        assert self._template is not None, "backend used before start()"
        tools = [t.model_dump(exclude_none=True) for t in request.tools or []] or None
        prompt = self._template.render(request.messages, tools)
        tokens = self._tokenize(prompt, special=True, param="messages")
        grammar = _chat_grammar(request, tool)
        return self._job(tokens, request.output_limit(), request, request.stop_list(), grammar)

    # completions ----------------------------------------------------------------------

    async def completion(self, request: CompletionRequest) -> Completion:
        job = self._completion_job(request)
        text: list[str] = [_prompt_text(request)] if request.echo else []
        finished: Finished | None = None
        async for event in self._engine.run(job):
            if isinstance(event, Finished):
                finished = event
            else:
                text.append(event)
        assert finished is not None
        return Completion(
            model=request.model,
            choices=[CompletionChoice(text="".join(text), finish_reason=_finish(finished, None))],
            usage=Usage.of(finished.prompt_tokens, finished.completion_tokens),
        )

    async def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        job = self._completion_job(request)
        chunk_id, created = new_id("cmpl"), now()

        def chunk(text: str, finish: Any = None) -> Completion:
            choice = CompletionChoice(text=text, finish_reason=finish)
            return Completion(id=chunk_id, created=created, model=request.model, choices=[choice])

        if request.echo:
            yield chunk(_prompt_text(request))
        async for event in self._engine.run(job):
            if isinstance(event, Finished):
                yield chunk("", _finish(event, None))
                usage = Usage.of(event.prompt_tokens, event.completion_tokens)
                yield Completion(
                    id=chunk_id, created=created, model=request.model, choices=[], usage=usage
                )
            else:
                yield chunk(event)

    def _completion_job(self, request: CompletionRequest) -> GenerationJob:
        _reject_unsupported(n=request.n, logprobs=request.logprobs is not None)
        if request.best_of not in (None, 1):
            raise InvalidRequestError("best_of > 1 is not supported", param="best_of")
        if request.suffix:
            raise InvalidRequestError("suffix (insertion) is not supported", param="suffix")
        tokens = self._tokenize(_prompt_text(request), special=False, param="prompt")
        return self._job(tokens, request.max_tokens, request, request.stop_list(), None)

    # shared ---------------------------------------------------------------------------

    def _tokenize(self, text: str, *, special: bool, param: str) -> list[int]:
        tokens: list[int] = self._engine.first.tokenize(
            text.encode("utf-8"), add_bos=True, special=special
        )
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
        )
        return GenerationJob(tokens, limit, sampling, stops, grammar)


def _reject_unsupported(*, n: int | None, logprobs: bool) -> None:
    if n not in (None, 1):
        raise InvalidRequestError("n > 1 is not supported; send separate requests", param="n")
    if logprobs:
        raise InvalidRequestError(
            "logprobs are not supported by the llama.cpp backend", param="logprobs"
        )


def _forced_tool(request: ChatCompletionRequest) -> str | None:
    """The tool the model must call: a named ``tool_choice``, or ``required`` with one tool."""
    choice = request.tool_choice
    tools = request.tools or []
    if choice is None or choice in ("none", "auto"):
        return None
    if choice == "required":
        if len(tools) != 1:
            raise InvalidRequestError(
                "tool_choice 'required' needs exactly one tool here; name the tool instead",
                param="tool_choice",
            )
        return tools[0].function.name
    assert not isinstance(choice, str)
    if not any(t.function.name == choice.function.name for t in tools):
        raise InvalidRequestError(
            f"tool_choice names {choice.function.name!r}, which is not in tools",
            param="tool_choice",
        )
    return choice.function.name


def _chat_grammar(request: ChatCompletionRequest, tool: str | None) -> Any:
    from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

    schema: dict[str, Any] | None = None
    param = "response_format"
    if tool is not None:
        function = next(t.function for t in request.tools or [] if t.function.name == tool)
        schema, param = function.parameters or {"type": "object"}, "tools"
    elif request.response_format is not None and request.response_format.type == "json_schema":
        assert request.response_format.json_schema is not None
        schema = request.response_format.json_schema.schema_ or {"type": "object"}
    elif request.response_format is not None and request.response_format.type == "json_object":
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    if schema is None:
        return None
    try:
        return LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
    except Exception as exc:
        raise InvalidRequestError(f"unsupported JSON schema: {exc}", param=param) from exc


def _finish(finished: Finished, tool: str | None) -> Literal["stop", "length", "tool_calls"]:
    if finished.reason == "length":
        return "length"
    return "tool_calls" if tool is not None else "stop"


def _prompt_text(request: CompletionRequest) -> str:
    if isinstance(request.prompt, str):
        return request.prompt
    if len(request.prompt) != 1:
        raise InvalidRequestError("send one prompt per request", param="prompt")
    return request.prompt[0]


def _token_text(llama: Any, token: int) -> str:
    if token < 0:
        return ""
    piece: bytes = llama.detokenize([token], special=True)
    return piece.decode("utf-8", errors="replace")
