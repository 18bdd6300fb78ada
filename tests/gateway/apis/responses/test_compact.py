"""``POST /v1/responses/compact`` with the official openai SDK against a real `shunter
serve` in front of a scripted chat upstream on loopback: the model is asked for a summary,
the answer keeps the user messages and ends with a compaction item, and that output
continues the conversation from the summary."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.conftest import Server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn, gateway_over

HISTORY: Any = [
    {"role": "user", "content": "Fix the bug in parser.py."},
    {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "tests pass"},
    {"role": "assistant", "content": "Fixed."},
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(script=[Turn(text="SUMMARY: parser.py fixed.")]) as server:
        yield server


@pytest.fixture(scope="module")
def server(
    upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with gateway_over(upstream, tmp_path_factory.mktemp("compact")) as server:
        yield server


@pytest.fixture
def sdk(server: Server, upstream: ScriptedUpstream) -> Iterator[OpenAI]:
    upstream.bodies.clear()
    with OpenAI(base_url=server.api, api_key="unused", max_retries=0, timeout=60) as client:
        yield client


def test_a_compaction_keeps_the_user_messages_and_summarizes_the_rest(
    sdk: OpenAI, upstream: ScriptedUpstream
) -> None:
    raw = sdk.responses.with_raw_response.compact(
        model="agent", input=HISTORY, instructions="Be careful."
    )
    compacted = raw.parse()
    assert compacted.object == "response.compaction"
    kinds = [(item.type, getattr(item, "role", None)) for item in compacted.output]
    assert kinds == [("message", "user"), ("compaction", None)]
    assert compacted.usage.input_tokens > 0
    asked = upstream.bodies[0]
    assert asked["messages"][0] == {"role": "system", "content": "Be careful."}
    assert "summary" in asked["messages"][-1]["content"] and not asked.get("stream")

    later: Any = raw.http_response.json()["output"]
    sdk.responses.create(model="agent", input=[*later, {"role": "user", "content": "Next?"}])
    continued = [(m["role"], m["content"]) for m in upstream.bodies[1]["messages"]]
    assert continued == [
        ("user", "Fix the bug in parser.py."),
        ("user", "A summary of the conversation so far:\nSUMMARY: parser.py fixed."),
        ("user", "Next?"),
    ]


def test_a_compaction_made_elsewhere_is_refused_by_name(sdk: OpenAI) -> None:
    foreign: Any = [{"type": "compaction", "encrypted_content": "gAAAAB-opaque"}]
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model="agent", input=foreign)
    assert refused.value.param == "input[0].encrypted_content"
