"""The request path on real processes: a `shunter serve` in front of fault-injecting
OpenAI-compatible upstreams on loopback, driven by the openai SDK."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

HELLO = [{"role": "user", "content": "hi"}]


def deployment(name: str, upstream: FaultUpstream, price: float) -> str:
    return (
        f"  - {{name: {name}, backend: openai, base_url: '{upstream.url}/v1', model: up-{name},"
        f" timeouts: {{first_token_s: 1.5, total_s: 12}},"
        f" price: {{input_per_1m: {price}, output_per_1m: {price}}}}}\n"
    )


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[FaultUpstream, FaultUpstream]]:
    with FaultUpstream() as a, FaultUpstream() as b:
        yield a, b


@pytest.fixture(scope="module")
def gateway(
    upstreams: tuple[FaultUpstream, FaultUpstream], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    a, b = upstreams
    folder = tmp_path_factory.mktemp("request-path")
    config = folder / "shunter.yaml"
    config.write_text(
        "reliability: {retries: 1, backoff_base_s: 0.01, failure_threshold: 2, cooldown_s: 1,"
        " max_cooldown_s: 1}\n"
        "deployments:\n" + deployment("a", a, 0.1) + deployment("b", b, 5.0) + "models:\n"
        "  m: {candidates: [a, b]}\n"
        "  only-a: {candidates: [a]}\n"
        "  slo: {candidates: [a, b], policy: [healthy, {slo: {ttft_ms: 250}}, cheapest]}\n"
        "  hedged: {candidates: [a, b], policy: [first, {hedge: {after_ms: 150}}]}\n"
    )
    server = start_server(config, folder / "server.log")
    yield server
    stop_server(server)


@pytest.fixture
def client(gateway: Server) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.api, api_key="sk-test", max_retries=0, timeout=30) as sdk:
        yield sdk


@pytest.fixture(autouse=True)
def healthy_upstreams(
    upstreams: tuple[FaultUpstream, FaultUpstream], gateway: Server
) -> Iterator[None]:
    for upstream in upstreams:
        upstream.default_fault = None
        upstream.queue.clear()
    yield
    for upstream in upstreams:
        upstream.default_fault = None
        upstream.queue.clear()
    time.sleep(1.1)  # let any breaker that opened cool down, then close it with a probe
    body = {"model": "only-a", "messages": HELLO}
    assert httpx.post(f"{gateway.api}/chat/completions", json=body, timeout=30).is_success


@pytest.mark.parametrize("fault", ["500", "503", "429", "reset", "hang"])
def test_fallback_recovers_faults_before_the_first_byte(
    client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream], fault: str
) -> None:
    a, _ = upstreams
    a.default_fault = fault
    whole = client.chat.completions.with_raw_response.create(model="m", messages=HELLO)
    assert whole.headers["x-shunter-deployment"] == "b"
    assert whole.parse().choices[0].message.content
    stream = client.chat.completions.create(model="m", messages=HELLO, stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_retry_after_is_honoured_before_retrying(
    client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    a.queue.append("429:1")  # one 429 asking for 1 s, then a normal answer
    started = time.monotonic()
    # a's only candidate: retried there (with b free, a rate-limited a is left for b)
    raw = client.chat.completions.with_raw_response.create(model="only-a", messages=HELLO)
    assert raw.headers["x-shunter-deployment"] == "a"  # retried on a
    assert time.monotonic() - started >= 1.0


def test_failure_after_first_byte_is_an_error_frame_not_a_short_success(
    gateway: Server, client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    for fault in ("cut:3", "nodone:3"):
        a.default_fault = fault
        body = {"model": "only-a", "messages": HELLO, "stream": True}
        with httpx.stream("POST", f"{gateway.api}/chat/completions", json=body) as response:
            assert response.status_code == 200
            frames = [line for line in response.iter_lines() if line]
        assert frames[-1] == "data: [DONE]"
        error = json.loads(frames[-2].removeprefix("data: "))["error"]
        assert error["message"] and set(error) == {"message", "type", "param", "code"}
        assert sum('"delta"' in f for f in frames) == 3
        with pytest.raises(openai.APIError):
            for _ in client.chat.completions.create(model="only-a", messages=HELLO, stream=True):
                pass


def test_breaker_opens_then_a_probe_closes_it(
    client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    a.default_fault = "500"
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="only-a", messages=HELLO)  # 2 failures: open
    seen = len(a.requests)
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="only-a", messages=HELLO)
    assert info.value.status_code == 503
    assert info.value.code == "deployments_cooling_down"
    assert int(info.value.response.headers["retry-after"]) >= 1
    assert len(a.requests) == seen  # the open breaker kept the request off the upstream
    a.default_fault = None
    time.sleep(1.1)
    out = client.chat.completions.create(model="only-a", messages=HELLO)  # the probe
    assert out.choices[0].message.content
    assert len(a.requests) == seen + 1


def test_client_disconnect_closes_the_upstream_stream(
    gateway: Server, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    a.default_fault = "slow:200"
    body = {"model": "only-a", "messages": HELLO, "stream": True}
    with httpx.stream("POST", f"{gateway.api}/chat/completions", json=body) as response:
        next(response.iter_lines())
    recorded = a.last()
    assert recorded.wait_closed(timeout=3.0)
    assert recorded.chunks_sent < 20


def test_killed_deployment_moves_traffic(
    tmp_path: Path, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    _, b = upstreams
    with FaultUpstream() as doomed:
        config = tmp_path / "shunter.yaml"
        config.write_text(
            "deployments:\n"
            + deployment("doomed", doomed, 0.1)
            + deployment("b", b, 5.0)
            + "models:\n  m: {candidates: [doomed, b]}\n"
        )
        server = start_server(config, tmp_path / "server.log")
        try:
            with OpenAI(base_url=server.api, api_key="x", max_retries=0) as sdk:
                first = sdk.chat.completions.with_raw_response.create(model="m", messages=HELLO)
                assert first.headers["x-shunter-deployment"] == "doomed"
                doomed.stop()
                for _ in range(3):
                    moved = sdk.chat.completions.with_raw_response.create(model="m", messages=HELLO)
                    assert moved.headers["x-shunter-deployment"] == "b"
        finally:
            stop_server(server)


def test_slow_deployment_loses_traffic_to_the_slo_ranker(
    client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    a.default_fault = "slow:400"  # cheap, but every chunk waits 400 ms: TTFT misses 250 ms
    served, route = [], ""
    for _ in range(12):  # a's TTFT average needs a few slow samples to cross the target
        raw = client.chat.completions.with_raw_response.create(
            model="slo", messages=HELLO, stream=True
        )
        served.append(raw.headers["x-shunter-deployment"])
        route = raw.headers["x-shunter-route"]
        for _ in raw.parse():
            pass
        if served[-1] == "b":
            break
    assert served[0] == "a"  # the cheapest while its measured TTFT meets the SLO
    assert served[-1] == "b"  # then a's measured TTFT misses it: the pricier, fast one
    assert "slo" in route


def test_hedge_races_a_late_first_token_and_closes_the_loser(
    client: OpenAI, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    a.default_fault = "slow:2000"  # a's first chunk would take 2 s
    raw = client.chat.completions.with_raw_response.create(
        model="hedged", messages=HELLO, stream=True
    )
    assert raw.headers["x-shunter-deployment"] == "b"
    text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert text
    assert a.last().wait_closed(timeout=3.0)  # the late request was aborted upstream
    assert a.last().chunks_sent == 0
    a.default_fault = None
    fast = client.chat.completions.with_raw_response.create(
        model="hedged", messages=HELLO, stream=True
    )
    assert fast.headers["x-shunter-deployment"] == "a"  # on time: no hedge
    for _ in fast.parse():
        pass
