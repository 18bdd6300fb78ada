"""Send a workload to an OpenAI-compatible endpoint and time every request.

Streaming requests (the default) are timed from their SSE events: time to first token (the
first event that carries output), the gaps between such events (inter-token latency) and the
end. Output token counts come from the usage the stream reports (chat's usage chunk, asked for
with ``stream_options.include_usage``; the final Responses or Messages events), or from the
number of output events when it reports none. ``Endpoint.api`` picks the API
(:mod:`gateway.loadgen.apis`): chat completions, Responses or Anthropic's Messages.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from gateway.loadgen import apis
from gateway.loadgen.apis import Api
from gateway.loadgen.workload import Bounds, Level, RequestSpec, Workload, poisson_gaps

ResultCallback = Callable[["RequestResult"], None]


@dataclass(frozen=True)
class Endpoint:
    """Where and how to send: ``url`` is a base URL (``http://host:8000`` or ``.../v1``) or
    the full URL of the ``api``'s endpoint."""

    url: str
    model: str
    api_key: str | None = None
    stream: bool = True
    timeout_s: float = 300.0
    extra_body: dict[str, Any] = field(default_factory=dict)
    api: Api = "chat"

    @property
    def chat_url(self) -> str:
        """The URL requests go to: the API's endpoint (``/v1/chat/completions`` for chat)."""
        url, path = self.url.rstrip("/"), apis.PATHS[self.api]
        if url.endswith(path):
            return url
        if url.endswith("/v1"):
            return f"{url}{path}"
        return f"{url}/v1{path}"

    def headers(self) -> dict[str, str]:
        """Request headers (the key, when one is set)."""
        return apis.headers(self.api, self.api_key)

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        """The JSON body of one request."""
        body = apis.body(self.api, self.model, spec.messages, spec.max_tokens, self.stream)
        body.update(self.extra_body)
        return body


@dataclass
class RequestResult:
    """The timings of one request. ``error`` is ``None`` on success, else its kind:
    ``http_<status>``, ``timeout``, ``connection``, ``stream_error`` (an in-band error
    frame), ``incomplete`` (no ``[DONE]``) or ``bad_response``.

    ``ttft_s`` equals ``e2e_s`` without streaming (the first token arrives with the rest);
    ``tpot_s`` (time per output token after the first) needs streaming and two tokens."""

    index: int
    start_s: float
    e2e_s: float = 0.0
    ttft_s: float | None = None
    tpot_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int | None = None
    usage_reported: bool = False
    itl_s: list[float] = field(default_factory=list)
    error: str | None = None
    detail: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the request succeeded."""
        return self.error is None


@dataclass
class LevelRun:
    """Every result of one level, and its wall time (start to last completion)."""

    level: Level
    results: list[RequestResult]
    duration_s: float


def new_client(timeout_s: float = 300.0) -> httpx.AsyncClient:
    """An HTTP client without connection limits (the workload sets the concurrency)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), limits=limits)


async def run_level(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    workload: Workload,
    level: Level,
    bounds: Bounds,
    on_result: ResultCallback | None = None,
) -> LevelRun:
    """Run one level until ``bounds`` stop it, then wait for the requests in flight."""
    results: list[RequestResult] = []
    specs = workload.requests()
    started = time.perf_counter()
    deadline = started + bounds.duration_s if bounds.duration_s is not None else float("inf")
    issued = 0

    def may_issue(at: float) -> bool:
        under_cap = bounds.max_requests is None or issued < bounds.max_requests
        return under_cap and at < deadline

    async def one(spec: RequestSpec) -> None:
        result = await send_request(client, endpoint, spec, started)
        results.append(result)
        if on_result is not None:
            on_result(result)

    async def worker() -> None:
        nonlocal issued
        while may_issue(time.perf_counter()):
            issued += 1
            await one(next(specs))

    async with asyncio.TaskGroup() as group:
        if level.mode == "concurrency":
            for _ in range(int(level.value)):
                group.create_task(worker())
        else:
            at = started
            gaps = poisson_gaps(level.value, workload.seed)
            while may_issue(at):
                await asyncio.sleep(max(0.0, at - time.perf_counter()))
                if not may_issue(time.perf_counter()):  # slept past the deadline
                    break
                issued += 1
                group.create_task(one(next(specs)))
                at += next(gaps)
    results.sort(key=lambda r: r.index)
    return LevelRun(level, results, time.perf_counter() - started)


async def send_request(
    client: httpx.AsyncClient, endpoint: Endpoint, spec: RequestSpec, origin: float
) -> RequestResult:
    """Send one request and time it; never raises for HTTP, network or protocol failures."""
    sent = time.perf_counter()
    result = RequestResult(spec.index, start_s=sent - origin)
    try:
        async with asyncio.timeout(endpoint.timeout_s):
            if endpoint.stream:
                await _stream(client, endpoint, spec, result, sent)
            else:
                await _plain(client, endpoint, spec, result)
    except (TimeoutError, httpx.TimeoutException) as exc:
        _fail(result, "timeout", str(exc) or f"no answer within {endpoint.timeout_s:g}s")
    except httpx.TransportError as exc:
        _fail(result, "connection", f"{type(exc).__name__}: {exc}")
    except httpx.RequestError as exc:  # undecodable body, redirect loop
        _fail(result, "bad_response", f"{type(exc).__name__}: {exc}")
    result.e2e_s = time.perf_counter() - sent
    if result.ok and not endpoint.stream:
        result.ttft_s = result.e2e_s
    if result.ok and result.ttft_s is not None and endpoint.stream and result.output_tokens > 1:
        result.tpot_s = (result.e2e_s - result.ttft_s) / (result.output_tokens - 1)
    return result


def _fail(result: RequestResult, kind: str, detail: str) -> None:
    result.error = kind
    result.detail = detail[:300]


async def _stream(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    spec: RequestSpec,
    result: RequestResult,
    sent: float,
) -> None:
    body, api = endpoint.body(spec), endpoint.api
    headers = endpoint.headers()
    async with client.stream("POST", endpoint.chat_url, json=body, headers=headers) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            return _fail(result, f"http_{response.status_code}", text)
        chunks, last, done = 0, sent, False
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                event = json.loads(data)
            except json.JSONDecodeError:
                return _fail(result, "bad_response", f"not JSON: {data[:200]}")
            if not isinstance(event, dict):
                return _fail(result, "bad_response", f"not an object: {data[:200]}")
            failed = apis.failure(api, event)
            if failed is not None:
                return _fail(result, "stream_error", json.dumps(failed))
            now = time.perf_counter()
            if apis.has_output(api, event):
                if result.ttft_s is None:
                    result.ttft_s = now - sent
                else:
                    result.itl_s.append(now - last)
                last = now
                chunks += 1
            _read_usage(api, event, result)
            if apis.ends(api, event):
                done = True
                break
        if not done:
            end = "[DONE]" if api == "chat" else "its final event"
            return _fail(result, "incomplete", f"the stream ended without {end}")
        if not result.usage_reported:
            result.output_tokens = chunks


async def _plain(
    client: httpx.AsyncClient, endpoint: Endpoint, spec: RequestSpec, result: RequestResult
) -> None:
    response = await client.post(
        endpoint.chat_url, json=endpoint.body(spec), headers=endpoint.headers()
    )
    if response.status_code != 200:
        return _fail(result, f"http_{response.status_code}", response.text)
    try:
        answer = response.json()
    except json.JSONDecodeError:
        return _fail(result, "bad_response", f"not JSON: {response.text[:200]}")
    words = apis.output_words(endpoint.api, answer) if isinstance(answer, dict) else None
    if words is None:
        return _fail(result, "bad_response", f"no answer: {response.text[:200]}")
    _read_usage(endpoint.api, answer, result)
    if not result.usage_reported:  # approximate: whitespace-separated words
        result.output_tokens = words


def _read_usage(api: Api, event: dict[str, Any], result: RequestResult) -> None:
    prompt, output = apis.usage(api, event)
    if output is not None:
        result.output_tokens = output
        result.usage_reported = True
    if prompt is not None and (api != "messages" or prompt or not result.prompt_tokens):
        result.prompt_tokens = prompt
