"""Streams that survive their upstream, as a client sees them: a real `shunter serve` in front
of fault-injecting OpenAI-compatible upstreams on loopback that cut, error or stall
mid-answer, healthy candidates that continue the answer, and the openai SDK as the client.

The upstreams answer ``word0 ... word19`` and continue an answer as a model would (see
:mod:`tests.fixtures.fault_upstream`), so a resumed answer is whole exactly when it reads
the same as an uninterrupted one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import CHUNKS, TOOL_AT, FaultUpstream, tool_arguments

HELLO = [{"role": "user", "content": "hi"}]
TEXT = "".join(f"word{i} " for i in range(CHUNKS))


class Upstreams:
    def __init__(self) -> None:
        self.a, self.b, self.n = FaultUpstream(), FaultUpstream(), FaultUpstream()
        self.c = FaultUpstream()

    def all(self) -> tuple[FaultUpstream, ...]:
        return self.a, self.b, self.n, self.c


def deployment(name: str, upstream: FaultUpstream, extra: str = "") -> str:
    # stall_s well above a loaded runner's hiccups: only the stall fault comes near it
    return (
        f"  - {{name: {name}, backend: openai, base_url: '{upstream.url}', model: up-{name},"
        f" timeouts: {{first_token_s: 5, total_s: 20, stall_s: 1.5}}{extra}}}\n"
    )


@pytest.fixture(scope="module")
def ups() -> Iterator[Upstreams]:
    found = Upstreams()
    for upstream in found.all():
        upstream.start()
    yield found
    for upstream in found.all():
        upstream.stop()


@pytest.fixture(scope="module")
def gateway(ups: Upstreams, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("resume")
    config = folder / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        + deployment("a", ups.a)
        + deployment("b", ups.b)
        + deployment("n", ups.n)  # its upstream refuses prefill
        + deployment("q", ups.b, ", prefill: false")
        + deployment("c", ups.c)
        + "models:\n"
        "  m: {candidates: [a, b]}\n"
        "  three: {candidates: [a, b, c]}\n"
        "  twice: {candidates: [a, b, c], max_resumes: 2}\n"
        "  refusing: {candidates: [a, n]}\n"
        "  declared: {candidates: [a, q]}\n"
        "  no-resume: {candidates: [a, b], resume: false}\n"
        "  alone: {candidates: [a]}\n"
    )
    server = start_server(config, folder / "server.log")
    yield server
    stop_server(server)


@pytest.fixture
def client(gateway: Server) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.api, api_key="sk-test", max_retries=0, timeout=30) as sdk:
        yield sdk


@pytest.fixture(autouse=True)
def healthy(ups: Upstreams) -> Iterator[None]:
    ups.n.default_fault = "noprefill"
    yield
    for upstream in ups.all():
        upstream.queue.clear()


def stream_text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def frames(gateway: Server, body: dict[str, Any], path: str = "chat/completions") -> list[str]:
    with httpx.stream("POST", f"{gateway.api}/{path}", json=body, timeout=20) as response:
        assert response.status_code == 200
        return [line for line in response.iter_lines() if line]


def metric(gateway: Server, series: str) -> float:
    for line in httpx.get(f"{gateway.base_url}/metrics", timeout=10).text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(
    ("fault", "cause"), [("cut:5", "cut"), ("error:5", "error"), ("stall:5", "stalled")]
)
def test_a_stream_that_fails_mid_answer_is_continued_on_the_next_candidate(
    gateway: Server, client: OpenAI, ups: Upstreams, fault: str, cause: str
) -> None:
    ups.a.queue.append(fault)
    seen_b = len(ups.b.requests)
    before = metric(
        gateway, f'shunter_resumes_total{{cause="{cause}",deployment="a",outcome="resumed"}}'
    )
    raw = client.chat.completions.with_raw_response.create(
        model="m",
        messages=HELLO,
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=100,
    )
    assert raw.headers["x-shunter-deployment"] == "a"  # committed before the failure
    chunks = list(raw.parse())  # the SDK raises on an in-band error: none comes
    assert stream_text(chunks) == TEXT
    assert {c.id for c in chunks} == {"chatcmpl-fault"} and {c.model for c in chunks} == {"up-a"}
    assert [c.choices[0].delta.role for c in chunks if c.choices].count("assistant") == 1
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert [f for f in finishes if f is not None] == ["stop"]
    # b was asked for the rest: the delivered text as an assistant message to continue
    (asked,) = ups.b.requests[seen_b:]
    tail = asked.body["messages"][-1]
    assert tail == {"role": "assistant", "content": "word0 word1 word2 word3 word4 "}
    assert asked.body["continue_final_message"] is True
    assert asked.body["max_tokens"] == 95
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.completion_tokens == CHUNKS  # every delivered token, once
    (resumed,) = (usage.model_extra or {})["resumed"]
    assert resumed["deployment"] == "a" and resumed["resumed_on"] == "b"
    assert resumed["cause"] == cause and resumed["form"] == "prefill"
    assert resumed["after_tokens"] == 5 and resumed["completion_tokens"] == CHUNKS - 5
    # the continuation's own prompt is part of the answer's: it was sent and is charged
    assert 0 < resumed["prompt_tokens"] < usage.prompt_tokens
    after = metric(
        gateway, f'shunter_resumes_total{{cause="{cause}",deployment="a",outcome="resumed"}}'
    )
    assert after == before + 1
    assert '"resumed": "b after a: ' + cause in gateway.log()


def test_the_resume_point_is_marked_by_a_comment_line(gateway: Server, ups: Upstreams) -> None:
    ups.a.queue.append("cut:3")
    lines = frames(gateway, {"model": "m", "messages": HELLO, "stream": True})
    comments = [i for i, line in enumerate(lines) if line.startswith(":")]
    assert [lines[i] for i in comments] == [": resumed on b after a: cut"]
    assert comments == [3]  # right after the three chunks a delivered
    assert lines[-1] == "data: [DONE]" and not any('"error"' in line for line in lines)


def test_a_candidate_that_refuses_prefill_gets_a_user_turn(client: OpenAI, ups: Upstreams) -> None:
    ups.a.queue.append("cut:3")
    seen = len(ups.n.requests)
    chunks = list(client.chat.completions.create(model="refusing", messages=HELLO, stream=True))
    assert stream_text(chunks) == TEXT  # the repeated "word2 " it started with is trimmed
    refused, answered = ups.n.requests[seen:]
    assert refused.body["messages"][-1]["role"] == "assistant"
    turn = answered.body["messages"][-1]
    assert turn["role"] == "user" and "word0 word1 word2 \n</partial_answer>" in turn["content"]
    assert "continue_final_message" not in answered.body
    # learned: the next resume there goes straight to the user turn
    ups.a.queue.append("cut:7")
    seen = len(ups.n.requests)
    chunks = list(client.chat.completions.create(model="refusing", messages=HELLO, stream=True))
    assert stream_text(chunks) == TEXT
    assert [r.body["messages"][-1]["role"] for r in ups.n.requests[seen:]] == ["user"]


def test_a_deployment_declared_without_prefill_gets_a_user_turn_at_once(
    client: OpenAI, ups: Upstreams
) -> None:
    ups.a.queue.append("error:4")
    seen = len(ups.b.requests)
    chunks = list(client.chat.completions.create(model="declared", messages=HELLO, stream=True))
    assert stream_text(chunks) == TEXT
    (asked,) = ups.b.requests[seen:]
    assert asked.body["model"] == "up-q" and asked.body["messages"][-1]["role"] == "user"


@pytest.mark.parametrize("restart", [0, 20, 99])  # the top, mid-way, at the cut
@pytest.mark.parametrize("model", ["refusing", "declared"])
def test_a_user_turn_answer_that_starts_again_is_trimmed_wherever_it_starts(
    client: OpenAI, ups: Upstreams, model: str, restart: int
) -> None:
    # a long answer: the delivered text (45 words, ~300 characters) is longer than any
    # fixed window a trimmer could look back over
    ups.a.queue.append("chunks:60,cut:45")
    fault = f"chunks:60,restart:{restart}"
    ups.n.queue.extend([f"noprefill,{fault}"] * 2)  # the prefill (refused), then the user turn
    ups.b.queue.append(fault)
    chunks = list(client.chat.completions.create(model=model, messages=HELLO, stream=True))
    assert stream_text(chunks) == "".join(f"word{i} " for i in range(60))


@pytest.mark.parametrize("model", ["no-resume", "alone"])
def test_without_a_resume_the_client_gets_the_in_band_error(
    client: OpenAI, ups: Upstreams, model: str
) -> None:
    ups.a.queue.append("cut:5")
    seen = len(ups.b.requests)
    stream = client.chat.completions.create(model=model, messages=HELLO, stream=True)
    with pytest.raises(openai.APIError):
        list(stream)
    assert len(ups.b.requests) == seen


def test_a_continuation_that_fails_too_ends_with_the_in_band_error(
    gateway: Server, client: OpenAI, ups: Upstreams
) -> None:
    ups.a.queue.append("cut:5")
    ups.b.queue.append("503")
    before = metric(gateway, 'shunter_resumes_total{cause="cut",deployment="a",outcome="failed"}')
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="m", messages=HELLO, stream=True))
    after = metric(gateway, 'shunter_resumes_total{cause="cut",deployment="a",outcome="failed"}')
    assert after == before + 1


def test_a_text_completion_stream_is_continued_from_its_prompt(
    client: OpenAI, ups: Upstreams
) -> None:
    ups.a.queue.append("cut:4")
    seen = len(ups.b.requests)
    chunks = list(client.completions.create(model="m", prompt="say: ", stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == TEXT
    assert {c.id for c in chunks} == {"cmpl-fault"}
    (asked,) = ups.b.requests[seen:]
    assert asked.body["prompt"] == "say: word0 word1 word2 word3 "


def test_a_responses_stream_is_continued(client: OpenAI, ups: Upstreams) -> None:
    ups.a.queue.append("cut:6")
    seen = len(ups.b.requests)
    events = list(client.responses.create(model="m", input="hi", stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == TEXT
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == TEXT
    (asked,) = ups.b.requests[seen:]
    assert asked.body["messages"][-1]["content"] == "".join(f"word{i} " for i in range(6))


def test_a_continuation_that_fails_is_continued_again_up_to_max_resumes(
    client: OpenAI, ups: Upstreams
) -> None:
    ups.a.queue.append("cut:3")
    ups.b.queue.append("cut:4")  # b's continuation breaks after word3 ... word6
    seen = len(ups.c.requests)
    chunks = list(
        client.chat.completions.create(
            model="twice",
            messages=HELLO,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert stream_text(chunks) == TEXT
    (asked,) = ups.c.requests[seen:]
    assert asked.body["messages"][-1]["content"] == "".join(f"word{i} " for i in range(7))
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == CHUNKS
    first, second = (usage.model_extra or {})["resumed"]
    assert (first["deployment"], first["resumed_on"], first["after_tokens"]) == ("a", "b", 3)
    assert (second["deployment"], second["resumed_on"], second["after_tokens"]) == ("b", "c", 7)
    assert second["completion_tokens"] == CHUNKS - 7


def test_max_resumes_bounds_the_continuations_of_one_stream(client: OpenAI, ups: Upstreams) -> None:
    ups.a.queue.append("cut:3")
    ups.b.queue.append("cut:4")
    seen = len(ups.c.requests)
    stream = client.chat.completions.create(model="three", messages=HELLO, stream=True)
    received: list[str] = []
    with pytest.raises(openai.APIError):
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
    assert "".join(received) == "".join(f"word{i} " for i in range(7))  # a's and b's, once
    assert len(ups.c.requests) == seen  # the one resume allowed was spent on b


def test_a_messages_stream_is_continued(gateway: Server, ups: Upstreams) -> None:
    ups.a.queue.append("error:5")
    seen = len(ups.b.requests)
    body = {"model": "m", "max_tokens": 100, "messages": HELLO, "stream": True}
    lines = frames(gateway, body, "messages")
    events = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text == TEXT
    types = [e["type"] for e in events]
    assert types.count("message_start") == 1 and types[-1] == "message_stop"
    assert [e["delta"]["stop_reason"] for e in events if e["type"] == "message_delta"] == [
        "end_turn"
    ]
    (asked,) = ups.b.requests[seen:]
    assert asked.body["messages"][-1]["content"] == "".join(f"word{i} " for i in range(5))


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"words": {"type": "string"}}},
        },
    }
]


@pytest.mark.parametrize("cut", [2, 4, 9])  # in the text, as the call opens, in its arguments
def test_a_tool_call_under_way_is_continued(client: OpenAI, ups: Upstreams, cut: int) -> None:
    ups.a.queue.append(f"cut:{cut},tools")
    ups.b.queue.append("tools")  # the continuation calls the tool too
    seen = len(ups.b.requests)
    chunks = list(
        client.chat.completions.create(model="m", messages=HELLO, tools=TOOLS, stream=True)
    )
    assert stream_text(chunks) == "word0 word1 word2 "
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or ()]
    assert {d.index for d in deltas} == {0}
    assert [d.id for d in deltas if d.id] == ["call_fault"]  # opened once
    assert [d.function.name for d in deltas if d.function and d.function.name] == ["lookup"]
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert arguments == tool_arguments()  # nothing repeated, nothing lost
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert [f for f in finishes if f is not None] == ["tool_calls"]
    (asked,) = ups.b.requests[seen:]
    said = "".join(f"word{i} " for i in range(min(cut, TOOL_AT)))
    assert asked.body["messages"][-1] == {"role": "assistant", "content": said}
    assert asked.body["continue_final_message"] is True


def test_a_tool_call_is_not_continued_through_a_user_turn(client: OpenAI, ups: Upstreams) -> None:
    ups.a.queue.append("cut:6,tools")
    seen = len(ups.b.requests)
    stream = client.chat.completions.create(
        model="declared", messages=HELLO, tools=TOOLS, stream=True
    )
    with pytest.raises(openai.APIError):
        list(stream)
    assert len(ups.b.requests) == seen  # q takes no prefill: nothing it could continue
