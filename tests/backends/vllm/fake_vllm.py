"""A fake vLLM for the adapter's tests: no vLLM, no GPU.

* :class:`FakeAsyncLLM` implements the part of ``vllm.v1.engine.async_llm.AsyncLLM`` the
  adapter and the serving layer use: ``generate`` (an async generator of DELTA
  ``RequestOutput``-like objects, one token per step), ``abort``, ``sleep``/``wake_up``,
  ``shutdown``, ``errored``. After every step it reports to the stat logger hook, as
  vLLM's output handler does, with ``SchedulerStats``/``IterationStats``-like objects.
* :class:`FakeServing` stands in for vLLM's ``OpenAIServingChat``/``Completion``: JSON
  body in; a response dict (nulls included, as ``model_dump()``), an ``ErrorResponse``
  dict or SSE frames (``data: ...``, ``exclude_unset`` style) out, driving ``generate``.

A test steps the engine by hand with ``gate`` (one release per token) or lets it run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from backends.vllm.engine import Endpoint, Reply, Runtime, StatsRecorder
from backends.vllm.settings import VLLMSettings

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0


@dataclass
class PrefixCacheStats:
    queries: int = 0
    hits: int = 0
    reset: bool = False


@dataclass
class SchedulerStats:
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_stats: PrefixCacheStats = field(default_factory=PrefixCacheStats)


@dataclass
class PromptTokenStats:
    computed: int = 0


@dataclass
class IterationStats:
    num_generation_tokens: int = 0
    prompt_token_stats: PromptTokenStats = field(default_factory=PromptTokenStats)


@dataclass
class SamplingParams:
    max_tokens: int
    output_kind: str = "DELTA"


class EngineDeadError(Exception):
    """Like vLLM's: the engine core died."""


class FakeAsyncLLM:
    """One token per step; ``die_after`` tokens kills the engine mid-request."""

    def __init__(
        self,
        recorder: StatsRecorder,
        *,
        gate: asyncio.Semaphore | None = None,
        waiting: int = 0,
        cached_tokens: int = 0,
        die_after: int | None = None,
        abort_after: int | None = None,
        sleep_error: Exception | None = None,
        wake_error: Exception | None = None,
    ) -> None:
        self.recorder = recorder
        self.gate = gate
        self.waiting = waiting
        self.cached_tokens = cached_tokens
        self.die_after = die_after
        self.abort_after = abort_after
        self.sleep_error = sleep_error
        self.wake_error = wake_error
        self.errored = False
        self.live: dict[str, bool] = {}
        self.started: list[str] = []
        self.aborted: list[str] = []
        self.calls: list[str] = []
        self.is_shut_down = False

    async def generate(
        self, prompt_token_ids: list[int], sampling_params: SamplingParams, request_id: str
    ) -> AsyncGenerator[RequestOutput, None]:
        if self.errored:
            raise EngineDeadError("EngineCore encountered an issue.")
        if self.calls and self.calls[-1] == "sleep":
            raise AssertionError("generate on a sleeping engine")
        self.live[request_id] = True
        self.started.append(request_id)
        prompt = list(prompt_token_ids)
        try:
            for step in range(sampling_params.max_tokens):
                if self.gate is not None:
                    await self.gate.acquire()
                else:
                    await asyncio.sleep(0)
                if self.die_after is not None and step == self.die_after:
                    self.errored = True
                    raise EngineDeadError("EngineCore encountered an issue.")
                aborted = not self.live.get(request_id) or step == self.abort_after
                last = step == sampling_params.max_tokens - 1
                self._record(prefill=len(prompt) if step == 0 else 0)
                finish = "abort" if aborted else ("length" if last else None)
                text = "" if aborted else WORDS[step % len(WORDS)] + " "
                out = CompletionOutput(0, text, [] if aborted else [step], finish)
                yield RequestOutput(
                    request_id, prompt, [out], finish is not None, self.cached_tokens
                )
                if finish is not None:
                    return
        except (asyncio.CancelledError, GeneratorExit):
            await self.abort(request_id)  # what AsyncLLM.generate does on cancellation
            raise
        finally:
            self.live.pop(request_id, None)

    def _record(self, *, prefill: int) -> None:
        prefix = PrefixCacheStats(queries=prefill, hits=min(self.cached_tokens, prefill))
        scheduler = SchedulerStats(
            num_running_reqs=len(self.live),
            num_waiting_reqs=self.waiting,
            kv_cache_usage=0.25,
            prefix_cache_stats=prefix,
        )
        iteration = IterationStats(len(self.live), PromptTokenStats(computed=prefill))
        self.recorder.record(scheduler, iteration)

    async def abort(self, request_id: str) -> None:
        if request_id not in self.aborted:
            self.aborted.append(request_id)
        if request_id in self.live:
            self.live[request_id] = False

    async def sleep(self, level: int = 1) -> None:
        if self.sleep_error is not None:
            raise self.sleep_error
        self.calls.append("sleep")

    async def wake_up(self, tags: list[str] | None = None) -> bool:
        if self.wake_error is not None:
            raise self.wake_error
        self.calls.append("wake_up")
        return True

    def shutdown(self) -> None:
        self.is_shut_down = True


class FakeServing:
    """vLLM's OpenAI serving layer, as far as the adapter can tell."""

    def __init__(self, engine: FakeAsyncLLM, served: list[str], max_model_len: int) -> None:
        self.engine = engine
        self.served = served
        self.max_model_len = max_model_len
        self.bodies: list[dict[str, Any]] = []
        self.reply_override: Reply | None = None
        """Answer every request with this (an error, or frames) instead of generating."""

    def engine_request_id(self, endpoint: Endpoint, request_id: str) -> str:
        return ("chatcmpl-" if endpoint == "chat" else "cmpl-") + request_id

    async def chat(self, body: dict[str, Any]) -> Reply:
        prompt = " ".join(str(m.get("content", "")) for m in body["messages"])
        return await self._serve("chat", body, prompt)

    async def completion(self, body: dict[str, Any]) -> Reply:
        return await self._serve("completion", body, str(body["prompt"]))

    async def _serve(self, endpoint: Endpoint, body: dict[str, Any], prompt: str) -> Reply:
        self.bodies.append(body)
        if self.reply_override is not None:
            return self.reply_override
        if body["model"] not in self.served:
            return error(f"The model `{body['model']}` does not exist.", 404, "NotFoundError")
        tokens = list(range(len(prompt.split())))
        if len(tokens) > self.max_model_len:
            message = (
                f"This model's maximum context length is {self.max_model_len} tokens. "
                f"However, your prompt contains {len(tokens)} input tokens."
            )
            return error(message, 400, "BadRequestError", param="input_tokens")
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        request_id = self.engine_request_id(endpoint, body["request_id"])
        outputs = self.engine.generate(tokens, SamplingParams(max_tokens=limit), request_id)
        if body.get("stream"):
            return self._stream(endpoint, body, request_id, outputs)
        return await self._whole(endpoint, body, request_id, outputs)

    async def _whole(
        self,
        endpoint: Endpoint,
        body: dict[str, Any],
        request_id: str,
        outputs: AsyncGenerator[RequestOutput, None],
    ) -> dict[str, Any]:
        text, finish, count, prompt_tokens = "", None, 0, 0
        try:
            async for out in outputs:
                text += out.outputs[0].text
                count += len(out.outputs[0].token_ids)
                finish = out.outputs[0].finish_reason
                prompt_tokens = len(out.prompt_token_ids)
        except EngineDeadError as exc:
            return error(str(exc), 500, "InternalServerError")
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": count}
        usage["total_tokens"] = prompt_tokens + count
        usage_full: dict[str, Any] = {**usage, "prompt_tokens_details": None}
        if endpoint == "completion":
            choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None}
            obj = "text_completion"
        else:
            message = {"role": "assistant", "content": text, "refusal": None, "tool_calls": []}
            choice = {"index": 0, "message": message, "logprobs": None, "stop_reason": None}
            obj = "chat.completion"
        choice["finish_reason"] = finish
        return {
            "id": request_id,
            "object": obj,
            "created": int(time.time()),
            "model": body["model"],
            "choices": [choice],
            "usage": usage_full,
            "system_fingerprint": None,
            "kv_transfer_params": None,
        }

    async def _stream(
        self,
        endpoint: Endpoint,
        body: dict[str, Any],
        request_id: str,
        outputs: AsyncGenerator[RequestOutput, None],
    ) -> AsyncIterator[str]:
        created = int(time.time())
        obj = "chat.completion.chunk" if endpoint == "chat" else "text_completion"
        head = {"id": request_id, "object": obj, "created": created, "model": body["model"]}
        count, prompt_tokens, cached = 0, 0, 0
        try:
            if endpoint == "chat":
                role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
                yield frame({**head, "choices": [{**role, "logprobs": None}]})
            async for out in outputs:
                piece = out.outputs[0]
                count += len(piece.token_ids)
                prompt_tokens, cached = len(out.prompt_token_ids), out.num_cached_tokens
                if endpoint == "chat":
                    choice: dict[str, Any] = {"index": 0, "delta": {"content": piece.text}}
                else:
                    choice = {"index": 0, "text": piece.text}
                choice["finish_reason"] = piece.finish_reason
                yield frame({**head, "choices": [choice]})
            options = body.get("stream_options") or {}
            if options.get("include_usage"):
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": count,
                    "total_tokens": prompt_tokens + count,
                    "prompt_tokens_details": {"cached_tokens": cached},
                }
                yield frame({**head, "choices": [], "usage": usage})
        except EngineDeadError as exc:
            yield frame(error(str(exc), 500, "InternalServerError"))
        yield "data: [DONE]\n\n"


def frame(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


def error(message: str, code: int, kind: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass
class FakeVLLM:
    """What a test holds on to: the factory to pass and, once started, the parts."""

    gate: asyncio.Semaphore | None = None
    max_model_len: int = 64
    engine_options: dict[str, Any] = field(default_factory=dict)
    modalities: frozenset[str] | None = None
    """What the engine reports the loaded model reads besides text (``image``...)."""
    engine: FakeAsyncLLM | None = None
    serving: FakeServing | None = None
    settings: VLLMSettings | None = None

    async def factory(self, settings: VLLMSettings, recorder: StatsRecorder) -> Runtime:
        self.settings = settings
        self.engine = FakeAsyncLLM(recorder, gate=self.gate, **self.engine_options)
        served = [settings.model, *(a.name for a in settings.lora_adapters)]
        self.serving = FakeServing(self.engine, served, self.max_model_len)
        return Runtime(
            engine=self.engine,
            frontend=self.serving,
            max_model_len=self.max_model_len,
            max_num_seqs=settings.max_num_seqs or 8,
            kv_tokens=1024,
            modalities=self.modalities,
        )
