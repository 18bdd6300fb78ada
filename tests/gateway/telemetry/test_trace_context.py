"""Trace context end to end, between real processes: a client's ``traceparent`` goes through
a real ``shunter serve`` to a real upstream, and the spans arrive at a real OTLP receiver.

* with an exporter: the server span continues the client's trace, each attempt (a retry
  too) gets a client span under it, and the upstream request names that client span as
  its parent; the spans carry the GenAI attributes;
* without one: the upstream gets the client's ``traceparent``, ``tracestate`` and
  ``baggage`` unchanged, and ``x-request-id`` in every case.

Both hold for an OpenAI-compatible upstream and for an Anthropic one (whether the gateway
translates to it or passes a Messages request through).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.anthropic_upstream import AnthropicUpstream
from tests.fixtures.fault_upstream import FaultUpstream
from tests.gateway.telemetry.otlp_receiver import OTLPReceiver, ReceivedSpan

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
BAGGAGE = "tenant=acme,region=eu"
BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 7,
    "temperature": 0.5,
    "top_p": 0.9,
    "seed": 42,
}


ANTHROPIC_ENV = {"TRACE_ANTHROPIC_KEY": "sk-ant-trace-test"}


def write_config(path: Path, upstream: FaultUpstream, anthropic: AnthropicUpstream) -> Path:
    path.write_text(
        f"""
deployments:
  - {{name: up, backend: openai, base_url: "{upstream.url}", model: fake-model}}
  - name: anth
    backend: anthropic
    base_url: "{anthropic.url}"
    model: claude-fake
    api_key_env: TRACE_ANTHROPIC_KEY
models:
  m: {{candidates: [up]}}
  claude: {{candidates: [anth]}}
reliability: {{retries: 1, backoff_base_s: 0}}
"""
    )
    return path


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as fake:
        yield fake


@pytest.fixture(scope="module")
def anthropic() -> Iterator[AnthropicUpstream]:
    with AnthropicUpstream() as fake:
        yield fake


@pytest.fixture(scope="module")
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver("http/protobuf") as otlp:
        yield otlp


@pytest.fixture(scope="module")
def traced(
    upstream: FaultUpstream,
    anthropic: AnthropicUpstream,
    receiver: OTLPReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("traced")
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # export within a blink, not every 5 s
        "OTEL_SERVICE_NAME": "shunter-e2e",
        **ANTHROPIC_ENV,
    }
    config = write_config(tmp / "c.yaml", upstream, anthropic)
    server = start_server(config, tmp / "log", env=env)
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def untraced(
    upstream: FaultUpstream, anthropic: AnthropicUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("untraced")
    env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "", **ANTHROPIC_ENV}
    config = write_config(tmp / "c.yaml", upstream, anthropic)
    server = start_server(config, tmp / "log", env=env)
    yield server
    stop_server(server)


def _sent(upstream: FaultUpstream, request_id: str) -> list[dict[str, str]]:
    return [r.headers for r in upstream.requests if r.headers.get("x-request-id") == request_id]


def _in_trace(spans: list[ReceivedSpan], kind: str) -> list[ReceivedSpan]:
    found = [s for s in spans if s.trace_id == TRACE_ID and s.kind == kind]
    return sorted(found, key=lambda s: s.start_ns)


def test_spans_continue_the_client_trace_through_each_attempt(
    traced: Server, upstream: FaultUpstream, receiver: OTLPReceiver
) -> None:
    upstream.queue.append("500")  # the first attempt fails; the retry answers
    headers = {
        "traceparent": TRACEPARENT,
        "tracestate": TRACESTATE,
        "baggage": BAGGAGE,
        "x-request-id": "req-e2e-traced",
    }
    answer = httpx.post(f"{traced.api}/chat/completions", json=BODY, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    spans = receiver.wait_for(
        lambda s: len(_in_trace(s, "client")) == 2 and len(_in_trace(s, "server")) == 1
    )
    (server,) = _in_trace(spans, "server")
    failed, answered = _in_trace(spans, "client")
    assert server.parent_span_id == CLIENT_SPAN
    assert server.service == "shunter-e2e"
    assert failed.parent_span_id == answered.parent_span_id == server.span_id

    # each upstream request names its own attempt's span as parent, in the client's trace
    sent = _sent(upstream, "req-e2e-traced")
    assert [h["traceparent"] for h in sent] == [
        f"00-{TRACE_ID}-{failed.span_id}-01",
        f"00-{TRACE_ID}-{answered.span_id}-01",
    ]
    assert all(h["tracestate"] == TRACESTATE and h["baggage"] == BAGGAGE for h in sent)

    assert failed.attributes["error.type"]
    assert failed.attributes["http.response.status_code"] == 500
    assert failed.status_code == 2  # ERROR
    client = answered.attributes
    assert answered.name == "chat fake-model"
    assert client["gen_ai.operation.name"] == "chat"
    assert client["gen_ai.provider.name"] == "openai"
    assert client["gen_ai.request.model"] == "fake-model"
    assert client["server.address"] == "127.0.0.1"
    assert client["server.port"] == upstream.port
    assert client["gen_ai.request.max_tokens"] == 7
    assert client["gen_ai.request.temperature"] == 0.5
    assert client["gen_ai.request.top_p"] == 0.9
    assert client["gen_ai.request.seed"] == 42
    assert client["gen_ai.response.id"] == "chatcmpl-fault"
    assert client["gen_ai.response.finish_reasons"] == ["stop"]
    assert client["gen_ai.usage.output_tokens"] == 20
    assert client["gen_ai.usage.input_tokens"] > 0
    assert client["shunter.attempt"] == 1 and failed.attributes["shunter.attempt"] == 0
    assert "error.type" not in client

    own = server.attributes
    assert server.name == "chat m"
    assert own["gen_ai.request.model"] == "m"
    assert own["gen_ai.response.model"] == "fake-model"  # the model that answered
    assert own["gen_ai.response.finish_reasons"] == ["stop"]
    assert own["gen_ai.usage.output_tokens"] == 20
    assert own["http.response.status_code"] == 200
    assert own["shunter.request_id"] == "req-e2e-traced"
    assert own["shunter.route.deployment"] == "up"
    assert own["shunter.route.step"] == "only"
    assert own["shunter.route.candidates"] == ["up"]


def test_a_stream_marks_its_first_token_and_ends_with_its_usage(
    traced: Server, upstream: FaultUpstream, receiver: OTLPReceiver
) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    headers = {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    with httpx.stream(
        "POST", f"{traced.api}/chat/completions", json=body, headers=headers, timeout=10
    ) as answer:
        assert answer.status_code == 200
        frames = [line for line in answer.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "data: [DONE]"

    def done(spans: list[ReceivedSpan]) -> bool:
        return {s.kind for s in spans if s.trace_id == trace_id} == {"server", "client"}

    spans = [s for s in receiver.wait_for(done) if s.trace_id == trace_id]
    (client,) = [s for s in spans if s.kind == "client"]
    (server,) = [s for s in spans if s.kind == "server"]
    assert client.attributes["shunter.request.stream"] is True
    assert "gen_ai.request.stream" not in client.attributes
    ((event, event_attributes),) = client.events
    assert event == "gen_ai.first_token"
    assert event_attributes["gen_ai.response.time_to_first_chunk"] >= 0
    assert client.attributes["gen_ai.usage.output_tokens"] == 20
    assert client.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    # the stream's client span lasts to its last frame, inside the server span
    assert client.start_ns >= server.start_ns and client.end_ns <= server.end_ns
    assert client.end_ns - client.start_ns > 0
    assert server.attributes["gen_ai.response.time_to_first_chunk"] >= 0


def test_without_an_exporter_the_context_passes_through_unchanged(
    untraced: Server, upstream: FaultUpstream
) -> None:
    headers = {
        "traceparent": TRACEPARENT,
        "tracestate": TRACESTATE,
        "baggage": BAGGAGE,
        "x-request-id": "req-e2e-plain",
    }
    answer = httpx.post(f"{untraced.api}/chat/completions", json=BODY, headers=headers)
    assert answer.status_code == 200
    assert answer.headers["x-request-id"] == "req-e2e-plain"
    (sent,) = _sent(upstream, "req-e2e-plain")
    assert sent["traceparent"] == TRACEPARENT
    assert sent["tracestate"] == TRACESTATE
    assert sent["baggage"] == BAGGAGE
    # nothing is recorded, yet the log line names the client's trace
    line = _logged(untraced, lambda line: line.get("request_id") == "req-e2e-plain")
    assert line["trace_id"] == TRACE_ID


def test_without_a_client_context_the_upstream_still_gets_the_request_id(
    untraced: Server, upstream: FaultUpstream
) -> None:
    stream = {**BODY, "stream": True}
    for body in (BODY, stream):
        answer = httpx.post(f"{untraced.api}/chat/completions", json=body)
        assert answer.status_code == 200
        request_id = answer.headers["x-request-id"]
        (sent,) = _sent(upstream, request_id)
        assert "traceparent" not in sent and "tracestate" not in sent
    # a malformed traceparent is not passed on (W3C: start afresh), nor its tracestate
    bad = {"traceparent": "00-xyz-b7ad6b7169203331-01", "tracestate": TRACESTATE}
    answer = httpx.post(f"{untraced.api}/chat/completions", json=BODY, headers=bad)
    (sent,) = _sent(upstream, answer.headers["x-request-id"])
    assert "traceparent" not in sent and "tracestate" not in sent


def test_a_later_version_traceparent_goes_upstream_as_its_four_known_fields(
    untraced: Server, upstream: FaultUpstream
) -> None:
    later = f"cc-{TRACE_ID}-b7ad6b7169203331-01-" + "x" * 50_000
    headers = {"traceparent": later, "x-request-id": "req-e2e-later"}
    answer = httpx.post(f"{untraced.api}/chat/completions", json=BODY, headers=headers)
    assert answer.status_code == 200
    (sent,) = _sent(upstream, "req-e2e-later")
    assert sent["traceparent"] == f"00-{TRACE_ID}-b7ad6b7169203331-01"


def _sent_to_anthropic(anthropic: AnthropicUpstream, request_id: str) -> list[dict[str, str]]:
    return [r.headers for r in anthropic.requests if r.headers.get("x-request-id") == request_id]


def test_an_anthropic_upstream_continues_the_trace_too(
    traced: Server, anthropic: AnthropicUpstream, receiver: OTLPReceiver
) -> None:
    trace_id = "5a8c1e6b0f2d4c3b9e7a6d5c4b3a2918"
    headers = {
        "traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01",
        "baggage": BAGGAGE,
        "x-request-id": "req-e2e-anthropic",
    }
    body = {"model": "claude", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{traced.base_url}/v1/messages", json=body, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text

    def done(spans: list[ReceivedSpan]) -> bool:
        return {s.kind for s in spans if s.trace_id == trace_id} == {"server", "client"}

    spans = [s for s in receiver.wait_for(done) if s.trace_id == trace_id]
    (client,) = [s for s in spans if s.kind == "client"]
    (server,) = [s for s in spans if s.kind == "server"]
    assert server.parent_span_id == CLIENT_SPAN and client.parent_span_id == server.span_id
    assert client.attributes["gen_ai.provider.name"] == "anthropic"
    assert client.attributes["gen_ai.request.max_tokens"] == 16
    assert client.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    (sent,) = _sent_to_anthropic(anthropic, "req-e2e-anthropic")
    assert sent["traceparent"] == f"00-{trace_id}-{client.span_id}-01"
    assert sent["baggage"] == BAGGAGE


def test_without_an_exporter_an_anthropic_upstream_gets_the_client_context(
    untraced: Server, anthropic: AnthropicUpstream
) -> None:
    headers = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE, "x-request-id": "req-e2e-a"}
    stream = {**BODY, "model": "claude", "stream": True}
    for number, body in enumerate(({**BODY, "model": "claude"}, stream)):
        request_id = f"{headers['x-request-id']}-{number}"
        sent_headers = {**headers, "x-request-id": request_id}
        answer = httpx.post(f"{untraced.api}/chat/completions", json=body, headers=sent_headers)
        assert answer.status_code == 200, answer.text
        (sent,) = _sent_to_anthropic(anthropic, request_id)
        assert (sent["traceparent"], sent["tracestate"]) == (TRACEPARENT, TRACESTATE)


def _logged(server: Server, wanted: Callable[[dict[str, object]], bool]) -> dict[str, object]:
    """The first request line ``wanted`` picks. The line is written once the answer's last
    byte is sent, so the client can read its answer a moment before the line exists."""
    deadline = time.monotonic() + 10
    while True:
        for raw in server.log().splitlines():
            if raw.startswith("{"):
                line = json.loads(raw)
                if line.get("event") == "request" and wanted(line):
                    return dict(line)
        if time.monotonic() > deadline:
            raise AssertionError("no such request line in the log")
        time.sleep(0.05)


def test_log_lines_carry_the_trace_id(traced: Server) -> None:
    line = _logged(traced, lambda line: line.get("request_id") == "req-e2e-traced")
    assert line["trace_id"] == TRACE_ID
