"""Failover as an operator tests it: a real `shunter serve` in front of fault-injecting
OpenAI-compatible upstreams on loopback, a healthy second candidate behind the first, and
the openai SDK (the anthropic SDK for Messages) as the client. The first server runs with
the default reliability settings."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import CHUNKS, FaultUpstream, Recorded

HELLO = [{"role": "user", "content": "hi"}]
SAY: Any = HELLO  # as the anthropic SDK types its messages
TEXT = "".join(f"word{i} " for i in range(CHUNKS))
LONG = [{"role": "user", "content": "word " * 7500}]  # about 9,400 tokens at 4 characters each


def deployment(name: str, upstream: FaultUpstream) -> str:
    return (
        f"  - {{name: {name}, backend: openai, base_url: '{upstream.url}', model: up-{name},"
        " timeouts: {first_token_s: 5, total_s: 20}}\n"
    )


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[FaultUpstream, FaultUpstream]]:
    with FaultUpstream() as a, FaultUpstream() as b:
        yield a, b


@pytest.fixture(scope="module")
def config(
    upstreams: tuple[FaultUpstream, FaultUpstream],
    tiny_model: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    a, b = upstreams
    path = tmp_path_factory.mktemp("failover") / "shunter.yaml"
    path.write_text(
        "deployments:\n" + deployment("a", a) + deployment("b", b)
        + f"  - {{name: tiny, backend: llamacpp, model: '{tiny_model}', n_ctx: 512,"
        " parallel: 1, threads: 1}\n"
        "models:\n"
        "  m: {candidates: [a, b]}\n"
        "  only-a: {candidates: [a]}\n"
        "  local-first: {candidates: [tiny, b]}\n"
        "  cached: {candidates: [a], cache: {any_temperature: true}}\n"
    )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def gateway(config: Path) -> Iterator[Server]:
    server = start_server(config, config.parent / "server.log")
    yield server
    stop_server(server)


@pytest.fixture
def client(gateway: Server) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.api, api_key="sk-test", max_retries=0, timeout=30) as sdk:
        yield sdk


@pytest.fixture
def claude(gateway: Server) -> Iterator[Anthropic]:
    with Anthropic(base_url=gateway.base_url, api_key="sk-test", max_retries=0, timeout=30) as sdk:
        yield sdk


def breaker(gateway: Server, name: str) -> str:
    deployments = httpx.get(f"{gateway.base_url}/health/readiness", timeout=10).json()
    state: str = deployments["deployments"][name]["breaker"]
    return state


@pytest.fixture(autouse=True)
def healthy_upstreams(
    upstreams: tuple[FaultUpstream, FaultUpstream], gateway: Server
) -> Iterator[None]:
    yield
    for upstream in upstreams:
        upstream.default_fault = None
        upstream.queue.clear()
    # a breaker left open is probed back to half-open; one good answer closes it
    deadline = time.monotonic() + 30
    while breaker(gateway, "a") == "open" and time.monotonic() < deadline:
        time.sleep(0.2)
    body = {"model": "only-a", "messages": HELLO}
    assert httpx.post(f"{gateway.api}/chat/completions", json=body, timeout=30).is_success


def posts(upstream: FaultUpstream, since: int = 0) -> list[Recorded]:
    return [r for r in upstream.requests[since:] if r.method == "POST"]


def metric(exposition: str, series: str) -> float:
    """The value of one series in a Prometheus exposition (0 when absent)."""
    for line in exposition.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def sse_frames(
    gateway: Server, body: dict[str, object], path: str = "chat/completions"
) -> list[str]:
    with httpx.stream("POST", f"{gateway.api}/{path}", json=body, timeout=20) as response:
        assert response.status_code == 200
        return [line for line in response.iter_lines() if line]


# --- a finished stream without [DONE] ------------------------------------------------------


@pytest.mark.parametrize("fault", ["nosentinel", "nosentinel,hold"])
def test_a_finished_stream_without_done_is_a_whole_answer(
    gateway: Server, client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream], fault: str
) -> None:
    a, _ = upstreams
    stream = client.chat.completions.create(
        model="only-a",
        messages=HELLO,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"x_fault": fault},
    )
    chunks = list(stream)  # the SDK raises on an in-band error: none comes
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == CHUNKS  # the upstream's own usage
    body = {"model": "only-a", "messages": HELLO, "stream": True, "x_fault": fault}
    frames = sse_frames(gateway, body)
    assert frames[-1] == "data: [DONE]" and not any('"error"' in f for f in frames)
    if "hold" in fault:  # a body held open after the usage chunk is let go, not waited on
        assert a.last().wait_closed(timeout=10)


def test_a_finished_completion_stream_without_done_is_whole(gateway: Server) -> None:
    body = {"model": "only-a", "prompt": "say", "stream": True, "x_fault": "nosentinel"}
    frames = sse_frames(gateway, body, "completions")
    assert frames[-1] == "data: [DONE]" and not any('"error"' in f for f in frames)
    texts = [json.loads(f.removeprefix("data: "))["choices"] for f in frames[:-1]]
    assert "".join(c[0]["text"] for c in texts if c) == TEXT


# --- context length -------------------------------------------------------------------------


def test_context_length_moves_to_the_next_candidate_and_is_learned(
    gateway: Server, config: Path, client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    a.default_fault = "ctx:8192"
    seen_a = len(a.requests)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=LONG)
    assert raw.headers["x-shunter-deployment"] == "b"
    assert raw.headers["x-shunter-route"].startswith("b after a: context_length")
    assert raw.parse().choices[0].message.content == TEXT
    assert len(posts(a, seen_a)) == 1  # rejected once, never resent

    again = client.chat.completions.with_raw_response.create(model="m", messages=LONG)
    assert again.headers["x-shunter-deployment"] == "b"
    assert len(posts(a, seen_a)) == 1  # `capable` skips a for prompts this long now
    short = client.chat.completions.with_raw_response.create(model="m", messages=HELLO)
    assert short.headers["x-shunter-deployment"] == "a"  # and keeps it for short ones

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="only-a", messages=LONG)
    assert info.value.code == "context_length_exceeded"
    assert "8192" in info.value.message
    assert len(posts(a, seen_a)) == 2  # the short request only

    explain = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "route", "--config", str(config), "--model", "m",
         "--prompt-tokens", "9000", "--live", gateway.base_url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert explain.returncode == 0, explain.stderr
    assert "context 8192 (learned)" in explain.stdout
    assert explain.stdout.strip().splitlines()[-1].startswith("route: b")


def test_llama_cpp_s_own_length_check_moves_on(
    gateway: Server, client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    # about 250 tokens by the gateway's estimate, over 600 by the tiny model's tokenizer:
    # `capable` lets it through, the engine refuses it
    dense = [{"role": "user", "content": "word " * 200}]
    first = client.chat.completions.with_raw_response.create(
        model="local-first", messages=dense, max_tokens=8
    )
    assert first.headers["x-shunter-deployment"] == "b"
    assert first.headers["x-shunter-route"].startswith("b after tiny: context_length")
    again = client.chat.completions.with_raw_response.create(
        model="local-first", messages=dense, max_tokens=8
    )
    assert again.headers["x-shunter-deployment"] == "b"
    assert "after" not in again.headers["x-shunter-route"]  # `capable` dropped tiny first
    short = client.chat.completions.with_raw_response.create(
        model="local-first", messages=HELLO, max_tokens=4
    )
    assert short.headers["x-shunter-deployment"] == "tiny"
    assert short.parse().model == "tiny"  # an engine in the process: its deployment's name
    metrics = httpx.get(f"{gateway.base_url}/metrics", timeout=10).text
    series = 'shunter_fallbacks_total{cause="context_length",deployment="tiny"}'
    assert metric(metrics, series) == 1  # refused once, never resent


# --- answers that say who answered ----------------------------------------------------------


def test_route_header_and_metrics_after_a_rate_limited_fallback(
    gateway: Server, client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    a.queue.append("429")  # no retry-after
    seen_a = len(a.requests)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=HELLO)
    assert raw.headers["x-shunter-deployment"] == "b"
    assert raw.headers["x-shunter-upstream-model"] == "up-b"
    route = raw.headers["x-shunter-route"]
    assert route.startswith("b after a: rate_limited; policy: a")
    assert len(posts(a, seen_a)) == 1  # left for b, not retried
    metrics = httpx.get(f"{gateway.base_url}/metrics", timeout=10).text
    assert metric(metrics, 'shunter_fallbacks_total{cause="rate_limited",deployment="a"}') >= 1
    assert 'shunter_breaker_state{deployment="a",state="closed"} 1.0' in metrics
    assert breaker(gateway, "a") == "closed"


def test_answers_say_which_model_answered(
    gateway: Server, client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    whole = client.chat.completions.with_raw_response.create(model="only-a", messages=HELLO)
    assert whole.parse().model == "up-a"  # as OpenAI names the model it resolved
    assert whole.headers["x-shunter-upstream-model"] == "up-a"
    assert a.last().body["model"] == "up-a"
    chunks = list(
        client.chat.completions.create(
            model="only-a", messages=HELLO, stream=True, stream_options={"include_usage": True}
        )
    )
    assert len(chunks) == CHUNKS + 1 and {c.model for c in chunks} == {"up-a"}
    no_usage = list(
        client.chat.completions.create(
            model="only-a", messages=HELLO, stream=True, extra_body={"x_fault": "nousage"}
        )
    )
    assert {c.model for c in no_usage} == {"up-a"}
    text = client.completions.create(model="only-a", prompt="say")
    assert text.model == "up-a"
    streamed = list(client.completions.create(model="only-a", prompt="say", stream=True))
    assert {c.model for c in streamed} == {"up-a"}
    # after a fallback, the model that answered
    upstreams[0].queue.append("503")
    moved = client.chat.completions.with_raw_response.create(model="m", messages=HELLO)
    assert moved.headers["x-shunter-deployment"] == "b" and moved.parse().model == "up-b"


LIFECYCLE = (
    "response.created",
    "response.in_progress",
    "response.completed",
    "response.incomplete",
    "response.failed",
)


def lifecycle_models(events: Iterable[Any]) -> dict[str, str]:
    """The model each lifecycle event of a Responses stream names, by event type."""
    return {e.type: e.response.model for e in events if e.type in LIFECYCLE}


def response_text(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def test_responses_say_which_model_answered(
    client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    whole = client.responses.create(model="only-a", input="hi")
    assert whole.model == "up-a" and whole.output_text == TEXT
    assert client.responses.retrieve(whole.id).model == "up-a"  # as it was stored
    events = list(client.responses.create(model="only-a", input="hi", stream=True))
    started = {"response.created": "up-a", "response.in_progress": "up-a"}
    assert lifecycle_models(events) == {**started, "response.completed": "up-a"}
    assert client.responses.retrieve(events[-1].response.id).model == "up-a"
    a.queue.append("length")
    cut = list(client.responses.create(model="only-a", input="hi", stream=True))
    assert lifecycle_models(cut) == {**started, "response.incomplete": "up-a"}
    # after a fallback before the first byte, the fallback's model
    a.queue.append("503")
    moved = client.responses.with_raw_response.create(model="m", input="hi")
    assert moved.headers["x-shunter-deployment"] == "b" and moved.parse().model == "up-b"
    a.queue.append("503")
    events = list(client.responses.create(model="m", input="hi", stream=True))
    assert set(lifecycle_models(events).values()) == {"up-b"} and len(events) > 3
    # a stream resumed mid-way keeps the model it started with, as chat's chunks do
    a.queue.append("cut:5")
    resumed = list(client.responses.create(model="m", input="hi", stream=True))
    assert response_text(resumed) == TEXT
    assert lifecycle_models(resumed) == {**started, "response.completed": "up-a"}
    # one that nothing can continue fails, naming the model that answered so far
    a.queue.append("cut:5")
    failed = list(client.responses.create(model="only-a", input="hi", stream=True))
    assert lifecycle_models(failed) == {**started, "response.failed": "up-a"}


def test_messages_say_which_model_answered(
    claude: Anthropic, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    whole = claude.messages.create(model="only-a", max_tokens=100, messages=SAY)
    assert whole.model == "up-a" and whole.content[0].type == "text"
    with claude.messages.stream(model="only-a", max_tokens=100, messages=SAY) as stream:
        starts = [e.message.model for e in stream if e.type == "message_start"]
    assert starts == ["up-a"] and stream.get_final_message().model == "up-a"
    # after a fallback before the first byte, the fallback's model
    a.queue.append("503")
    raw = claude.messages.with_raw_response.create(model="m", max_tokens=100, messages=SAY)
    assert raw.headers["x-shunter-deployment"] == "b" and raw.parse().model == "up-b"
    a.queue.append("503")
    with claude.messages.stream(model="m", max_tokens=100, messages=SAY) as stream:
        starts = [e.message.model for e in stream if e.type == "message_start"]
    assert starts == ["up-b"]
    # a stream resumed mid-way keeps the model it started with, as chat's chunks do
    a.queue.append("cut:5")
    with claude.messages.stream(model="m", max_tokens=100, messages=SAY) as stream:
        starts = [e.message.model for e in stream if e.type == "message_start"]
        final = stream.get_final_message()
    assert starts == ["up-a"] and final.model == "up-a"
    assert final.content[0].type == "text" and final.content[0].text == TEXT


def test_a_cached_answer_names_the_model_that_made_it(client: OpenAI, claude: Anthropic) -> None:
    made = client.responses.create(model="cached", input="keep this")
    assert made.model == "up-a"
    hit = client.responses.with_raw_response.create(model="cached", input="keep this")
    assert hit.headers["x-shunter-cache"] == "hit" and hit.parse().model == "up-a"
    streamed = client.responses.with_raw_response.create(
        model="cached", input="keep this", stream=True
    )
    assert streamed.headers["x-shunter-cache"] == "hit"
    assert set(lifecycle_models(streamed.parse()).values()) == {"up-a"}

    said = claude.messages.create(model="cached", max_tokens=100, messages=SAY)
    assert said.model == "up-a"
    again = claude.messages.with_raw_response.create(model="cached", max_tokens=100, messages=SAY)
    assert again.headers["x-shunter-cache"] == "hit" and again.parse().model == "up-a"
    replayed = claude.messages.with_raw_response.create(
        model="cached", max_tokens=100, messages=SAY, stream=True
    )
    assert replayed.headers["x-shunter-cache"] == "hit"
    starts = [e.message.model for e in replayed.parse() if e.type == "message_start"]
    assert starts == ["up-a"]


def test_upstream_error_fields_survive_the_relay(
    client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    a.queue.append("400,param:temperature")
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="only-a", messages=HELLO)
    assert info.value.code == "invalid_value" and info.value.param == "temperature"


# --- a primary that recovers, with the default settings -------------------------------------


def test_a_recovered_primary_takes_traffic_again_within_ten_seconds(
    gateway: Server, client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    # long enough for a failed trial after the first cooldown (5 s): the breaker re-opens
    # for 10 s, so only a probe sees the recovery that soon
    outage_s = 10.0
    a.default_fault = "503"
    started = time.monotonic()
    recovered_at: float | None = None
    served: list[tuple[float, str]] = []
    while True:
        now = time.monotonic()
        if recovered_at is None and now - started >= outage_s:
            a.default_fault, recovered_at = None, now
        raw = client.chat.completions.with_raw_response.create(model="m", messages=HELLO)
        assert raw.parse().choices[0].message.content == TEXT  # every request is answered
        served.append((time.monotonic(), raw.headers["x-shunter-deployment"]))
        if recovered_at is not None and served[-1][1] == "a":
            break
        assert now - started < outage_s + 15, served
        time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))  # about one request a second
    assert recovered_at is not None
    back_after = served[-1][0] - recovered_at
    assert back_after <= 10.0, served
    assert any(name == "b" for _, name in served)  # b answered during the outage
    probes = [t for t in a.probes if started <= t <= recovered_at + back_after]
    assert probes  # recovery was seen by background probes, not only by user requests
    gaps = [later - earlier for earlier, later in itertools.pairwise(probes)]
    assert all(gap >= 1.5 for gap in gaps), gaps  # one probe per interval (2 s), no more
    metrics = httpx.get(f"{gateway.base_url}/metrics", timeout=10).text
    assert 'shunter_breaker_probes_total{deployment="a",result="unhealthy"}' in metrics
    assert metric(metrics, 'shunter_breaker_probes_total{deployment="a",result="healthy"}') >= 1
    assert 'shunter_fallbacks_total{cause="overloaded",deployment="a"}' in metrics


# --- back-off without retry-after -----------------------------------------------------------


@pytest.fixture(scope="module")
def retrying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, FaultUpstream]]:
    with FaultUpstream() as c:
        folder = tmp_path_factory.mktemp("backoff")
        path = folder / "shunter.yaml"
        path.write_text(
            "reliability: {retries: 3, failure_threshold: 10}\n"
            "deployments:\n" + deployment("c", c) + "models:\n  only-c: {candidates: [c]}\n"
        )
        server = start_server(path, folder / "server.log")
        yield server, c
        stop_server(server)


def test_retries_without_retry_after_back_off_and_space_out(
    retrying: tuple[Server, FaultUpstream],
) -> None:
    server, c = retrying
    c.default_fault = "429"
    sdk = OpenAI(base_url=server.api, api_key="sk-test", max_retries=0, timeout=60)
    with sdk, pytest.raises(openai.RateLimitError):
        sdk.chat.completions.create(model="only-c", messages=HELLO)
    times = [r.at for r in posts(c)]
    assert len(times) == 4  # the first try and three retries, on the only candidate
    for earlier, later in zip(times, times[2:], strict=False):
        assert later - earlier >= 0.95  # never more than two attempts within a second
    # full jitter up to 0.5, 1 and 2 s (the one-second window may add to the first two)
    assert times[-1] - times[0] <= 0.5 + 1.0 + 2.0 + 2.0
