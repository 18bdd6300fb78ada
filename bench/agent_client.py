"""The client side of ``bench/agent_replay.py``: every session replayed through the
gateway, each request streamed and timed at the client.

No session key is sent (no ``user``, no header): whatever keeps a session's turns together
is the gateway's policy. The deployment that served a request is read from the
``x-shunter-deployment`` header, prompt and cached prompt tokens from the stream's usage
(``prompt_tokens_details.cached_tokens``).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import httpx

from bench.agent_workload import Session, Shape, Turn, in_burst

REQUEST_TIMEOUT_S = 180.0


@dataclass
class Sent:
    """One replayed request and what came back."""

    session: int
    turn: int
    sent_s: float  # from the run's start
    in_burst: bool
    prompt_estimate: int  # the bench's own count (what the API bills)
    max_tokens: int
    deployment: str = ""
    route: str = ""  # the gateway's x-shunter-route reason
    ttft_s: float | None = None
    e2e_s: float = 0.0
    prompt_tokens: int | None = None
    cached_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    done: bool = False  # the stream's [DONE] arrived

    @property
    def ok(self) -> bool:
        """Answered in full."""
        return self.done and self.error is None and self.ttft_s is not None


def _read_usage(event: dict[str, object], sent: Sent) -> None:
    usage = event.get("usage")
    if not isinstance(usage, dict):
        return
    sent.prompt_tokens = usage.get("prompt_tokens")
    sent.output_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        sent.cached_tokens = int(details.get("cached_tokens") or 0)


async def _stream(client: httpx.AsyncClient, url: str, body: dict[str, object], sent: Sent) -> None:
    started = time.perf_counter()
    async with client.stream("POST", url, json=body) as response:
        sent.deployment = response.headers.get("x-shunter-deployment", "")
        sent.route = response.headers.get("x-shunter-route", "")[:300]
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            sent.error = f"http_{response.status_code}: {text[:200]}"
            return
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                sent.done = True
                return
            event = json.loads(data)
            if "error" in event:
                sent.error = f"stream_error: {json.dumps(event)[:200]}"
                return
            choices = event.get("choices") or []
            if sent.ttft_s is None and any((c.get("delta") or {}).get("content") for c in choices):
                sent.ttft_s = time.perf_counter() - started
            _read_usage(event, sent)
    sent.error = "incomplete: no [DONE]"


async def send_turn(
    client: httpx.AsyncClient, base: str, model: str, turn: Turn, sent: Sent
) -> None:
    """Stream one turn; fills ``sent`` (never raises for HTTP or network failures)."""
    body: dict[str, object] = {
        "model": model, "messages": list(turn.messages), "max_tokens": turn.max_tokens,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    started = time.perf_counter()
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            await _stream(client, f"{base}/v1/chat/completions", body, sent)
    except (TimeoutError, httpx.HTTPError, json.JSONDecodeError) as exc:
        sent.error = f"{type(exc).__name__}: {exc}"[:200]
    sent.e2e_s = time.perf_counter() - started


async def _session(
    client: httpx.AsyncClient, base: str, model: str, shape: Shape, session: Session,
    origin: float, out: list[Sent],
) -> None:  # fmt: skip
    await asyncio.sleep(max(0.0, origin + session.start_s - time.perf_counter()))
    for turn in session.turns:
        await asyncio.sleep(turn.think_s)
        at = time.perf_counter() - origin
        sent = Sent(
            session.index, turn.index, at, in_burst(shape, at), turn.prompt_tokens,
            turn.max_tokens,
        )  # fmt: skip
        out.append(sent)
        await send_turn(client, base, model, turn, sent)
        if not sent.ok:  # an agent whose call failed stops; later turns would not be the same
            return


async def replay(
    base: str, model: str, shape: Shape, sessions: list[Session], limit_s: float
) -> tuple[list[Sent], float]:
    """Replay every session through ``base``; the requests sent and the wall time.

    The run stops after ``limit_s`` seconds; requests still in flight then count as failed.
    """
    out: list[Sent] = []
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0)
    origin = time.perf_counter()
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        tasks = [
            asyncio.create_task(_session(client, base, model, shape, s, origin, out))
            for s in sessions
        ]
        done, pending = await asyncio.wait(tasks, timeout=limit_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            task.result()  # a bug in the client surfaces here, not as missing rows
    for sent in out:
        if not sent.done and sent.error is None:
            sent.error = "cut off: the run's time limit"
    return sorted(out, key=lambda s: s.sent_s), time.perf_counter() - origin
