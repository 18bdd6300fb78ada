"""Every answer of a real `shunter serve` (the tiny GGUF through llama.cpp) validates against
OpenAI's own response schemas: whole bodies, each streamed chunk, and error bodies. Raw
httpx, so that a ``null`` the SDK would tolerate is seen."""

from __future__ import annotations

import base64
import copy
import struct
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis.configuration import set_hypothesis_home_dir
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import content_type_conformance, response_schema_conformance

from tests.conftest import Server, start_server, stop_server
from tests.gateway.protocol.openapi import DOCUMENT, sse_data, violations

HELLO = [{"role": "user", "content": "Say hello"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
FORCED = {"type": "function", "function": {"name": "get_weather"}}


def config(tiny_model: Path) -> str:
    return (
        "deployments:\n"
        f"  - {{name: gen, backend: llamacpp, model: {tiny_model}, n_ctx: 1024, threads: 1,"
        " parallel: 2}\n"
        f"  - {{name: emb, backend: llamacpp, model: {tiny_model}, task: embed, n_ctx: 256,"
        " threads: 1}\n"
        "models:\n"
        "  tiny: {candidates: [gen]}\n"
        "  embed: {candidates: [emb]}\n"
    )


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("schema")
    (folder / "config.yaml").write_text(config(tiny_model))
    server = start_server(folder / "config.yaml", folder / "server.log")
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    headers = {"content-type": "application/json", "authorization": "Bearer sk-test"}
    with httpx.Client(base_url=server.api, headers=headers, timeout=120) as client:
        yield client


def post(http: httpx.Client, path: str, body: dict[str, Any], status: int = 200) -> Any:
    response = http.post(path, json=body)
    assert response.status_code == status, response.text
    return response.json()


def stream(http: httpx.Client, path: str, body: dict[str, Any]) -> list[Any]:
    response = http.post(path, json={**body, "stream": True})
    assert response.status_code == 200, response.text
    assert response.text.endswith("data: [DONE]\n\n")
    return sse_data(response.text)


CHAT_CASES = {
    "plain": {"max_tokens": 8},
    "logprobs": {"max_tokens": 6, "logprobs": True, "top_logprobs": 2, "seed": 1},
    "forced-tool": {"max_tokens": 60, "tools": [WEATHER], "tool_choice": FORCED},
}


@pytest.mark.parametrize("case", CHAT_CASES)
def test_chat_answers_validate(http: httpx.Client, case: str) -> None:
    body = {"model": "tiny", "messages": HELLO, **CHAT_CASES[case]}
    whole = post(http, "/chat/completions", body)
    assert violations("CreateChatCompletionResponse", whole) == []
    message = whole["choices"][0]["message"]
    assert ("tool_calls" in message) == (case == "forced-tool")
    if case == "logprobs":
        assert whole["choices"][0]["logprobs"]["content"]

    chunks = stream(http, "/chat/completions", {**body, "stream_options": {"include_usage": True}})
    assert len(chunks) > 2 and chunks[-1]["choices"] == [] and chunks[-1]["usage"]
    for chunk in chunks:
        assert violations("CreateChatCompletionStreamResponse", chunk) == [], chunk
    calls = [
        c
        for ch in chunks
        for choice in ch["choices"]
        for c in choice["delta"].get("tool_calls", [])
    ]
    if case == "forced-tool":
        assert calls[0]["id"] and len(calls) > 1  # the call opens, arguments follow
    else:
        assert calls == []


@pytest.mark.parametrize("logprobs", [None, 2])
def test_completion_answers_validate(http: httpx.Client, logprobs: int | None) -> None:
    body = {"model": "tiny", "prompt": "once", "max_tokens": 6, "logprobs": logprobs}
    whole = post(http, "/completions", body)
    assert violations("CreateCompletionResponse", whole) == []
    assert (whole["choices"][0]["logprobs"] is None) == (logprobs is None)

    chunks = stream(http, "/completions", {**body, "stream_options": {"include_usage": True}})
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]
    for chunk in chunks:
        # the schema's finish_reason made nullable, as OpenAI streams it (see openapi.py)
        assert violations("CreateCompletionStreamResponse", chunk) == [], chunk


def test_embeddings_validate(http: httpx.Client) -> None:
    answer = post(http, "/embeddings", {"model": "embed", "input": ["hello", "world"]})
    assert violations("CreateEmbeddingResponse", answer) == []
    assert len(answer["data"]) == 2


def test_models_validate(http: httpx.Client) -> None:
    listed = http.get("/models").json()
    assert violations("ListModelsResponse", listed) == []
    assert {m["id"] for m in listed["data"]} == {"tiny", "embed"}
    assert violations("Model", http.get("/models/tiny").json()) == []


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/chat/completions", {"model": "tiny", "messages": "hi"}, 400),
        ("POST", "/chat/completions", {"model": "nope", "messages": HELLO}, 404),
        ("POST", "/completions", {"model": "tiny", "prompt": "x", "best_of": 3}, 400),
        ("POST", "/embeddings", {"model": "tiny", "input": "x"}, 400),
        ("GET", "/models/nope", None, 404),
        ("GET", "/chat/completions", None, 405),
        ("GET", "/nothing-here", None, 404),
    ],
)
def test_error_bodies_validate(
    http: httpx.Client, method: str, path: str, body: Any, status: int
) -> None:
    response = http.request(method, path, json=body)
    assert response.status_code == status
    assert violations("ErrorResponse", response.json()) == []


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/completions", {"model": "tiny", "prompt": 5}, "prompt"),
        (
            "/chat/completions",
            {"model": "tiny", "messages": HELLO, "tool_choice": "x"},
            "tool_choice",
        ),
        (
            "/chat/completions",
            {"model": "tiny", "messages": [{"role": "user", "content": {}}]},
            "messages[0].content",
        ),
        ("/embeddings", {"model": "embed", "input": [["a"]]}, "input[0][0]"),
    ],
)
def test_param_names_the_request_field(
    http: httpx.Client, path: str, body: dict[str, Any], param: str
) -> None:
    error = post(http, path, body, status=400)["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


# --- property-based: Schemathesis over the same document --------------------------------
#
# Requests are generated from OpenAI's request schemas, positive (valid for OpenAI) and
# negative (violating them), and sent one at a time to the real server. Every answer must
# be: no server error, in time, and in OpenAI's shape (2xx bodies by the operation's response
# schema, each streamed chunk by the chunk schema, any 4xx as OpenAI's ErrorResponse).
#
# Statuses the document does not list are legitimate here and checked for shape only:
# 400/404/413/415 for what the gateway cannot serve (OpenAI accepts token-array prompts,
# n > 1, custom tool calls, models this gateway does not serve), 401/403 once keys or the
# open-mode guard apply. So `status_code_conformance` and `positive_data_acceptance` are not
# run, nor `negative_data_rejection`: unknown fields and some looser bounds are accepted on
# purpose. A 503 that says when to retry (queue full, deployments cooling down) is
# back-pressure the SDKs retry, not a server fault; any other 5xx fails.

OPERATIONS = {
    "createChatCompletion": "tiny",
    "createCompletion": "tiny",
    "createEmbedding": "embed",
    "listModels": None,
    "retrieveModel": None,
}
# One served request per operation, run first in positive mode: the stream, logprobs and
# base64 answers are checked every run, whatever the generator draws.
CHAT_STREAM = {
    "model": "tiny",
    "messages": HELLO,
    "stream": True,
    "stream_options": {"include_usage": True},
    "logprobs": True,
    "top_logprobs": 2,
}
SERVED: dict[str, dict[str, Any]] = {
    "createChatCompletion": {"body": CHAT_STREAM},
    "createCompletion": {"body": {"model": "tiny", "prompt": "a", "stream": True, "logprobs": 1}},
    "createEmbedding": {"body": {"model": "embed", "input": "a", "encoding_format": "base64"}},
    "listModels": {},
    "retrieveModel": {"path_parameters": {"model": "embed"}},
}
EXAMPLES = 30  # per operation and mode: about ten seconds in all on a 2-core machine
REQUEST_TIMEOUT_S = 60.0  # a hang fails the run (a stream must end within it too)
MAX_TOKENS = 4
MAX_STREAM_EVENTS = 1000


@pytest.fixture(scope="module")
def operations(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, APIOperation]]:
    # Hypothesis keeps caches under its home directory: a temporary one, not the checkout
    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    # read whole streams (the default stops after 20 events), each within the request timeout
    config = schemathesis.Config.from_dict({"max-stream-events": MAX_STREAM_EVENTS})
    schema = schemathesis.openapi.from_path(DOCUMENT, config=config)
    schema = schema.include(operation_id=list(OPERATIONS))
    found = {op.definition.raw["operationId"]: op for op in _loaded(schema)}
    assert set(found) == set(OPERATIONS)
    yield found
    set_hypothesis_home_dir(None)


def _loaded(schema: schemathesis.BaseSchema) -> Iterator[APIOperation]:
    for result in schema.get_all_operations():
        yield result.ok()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize("operation_id", OPERATIONS)
def test_generated_requests_get_answers_in_openai_shape(
    server: Server, operations: dict[str, APIOperation], operation_id: str, mode: GenerationMode
) -> None:
    operation = operations[operation_id]
    statuses: Counter[int] = Counter()
    fixed = {"model": "tiny"} if operation_id == "retrieveModel" and mode.is_positive else None

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # a failure is reported as found, unshrunk
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=fixed))
    def exchange(case: Case) -> None:
        servable(case, OPERATIONS[operation_id])
        headers = {"content-type": "application/json"}
        response = case.call(base_url=server.api, headers=headers, timeout=REQUEST_TIMEOUT_S)
        statuses[response.status_code] += 1
        check_answer(case, response)

    if mode.is_positive:
        served = operation.Case(**copy.deepcopy(SERVED[operation_id]))
        exchange = example(case=served)(exchange)
    exchange()
    if mode.is_positive:  # at least the served request reached a backend
        assert statuses[200] > 0, statuses


def servable(case: Case, model: str | None) -> None:
    """Point a generated body at a model this gateway serves and keep generation short.
    A field the generator made invalid keeps its invalid value."""
    body = case.body
    if model is None or not isinstance(body, dict):
        return
    if isinstance(body.get("model"), str):
        body["model"] = model
    if model == "embed":
        return
    limits = [key for key in ("max_tokens", "max_completion_tokens") if key in body]
    for key in limits:
        value = body[key]
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            body[key] = MAX_TOKENS if value is None else min(value, MAX_TOKENS)
    if not limits:
        body["max_tokens"] = MAX_TOKENS


def check_answer(case: Case, response: schemathesis.Response) -> None:
    status, headers = response.status_code, response.headers
    media = (headers.get("content-type") or [""])[0]
    backpressure = status == 503 and "retry-after" in headers
    assert status < 500 or backpressure, f"{status} for {case.body!r}: {response.text[:500]}"
    if status >= 400:
        assert media.startswith("application/json"), media
        assert violations("ErrorResponse", response.json()) == [], response.text
    elif media.startswith("text/event-stream"):
        check_stream(case, response.text)
    elif isinstance(case.body, dict) and case.body.get("encoding_format") == "base64":
        # OpenAI's schema knows only float vectors, yet OpenAI answers base64 as a string
        answer = response.json()
        for item in answer["data"]:
            item["embedding"] = floats(item["embedding"])
        assert violations("CreateEmbeddingResponse", answer) == []
    else:
        case.validate_response(
            response, checks=[response_schema_conformance, content_type_conformance]
        )


def check_stream(case: Case, text: str) -> None:
    chat = case.operation.path == "/chat/completions"
    schema = "CreateChatCompletionStreamResponse" if chat else "CreateCompletionStreamResponse"
    assert text.endswith("data: [DONE]\n\n"), f"{case.body!r} got {text[-300:]!r}"
    for chunk in sse_data(text):
        kind = "ErrorResponse" if "error" in chunk else schema
        assert violations(kind, chunk) == [], chunk


def floats(encoded: str) -> list[float]:
    """A base64 embedding as OpenAI encodes it: little-endian float32s."""
    raw = base64.b64decode(encoded, validate=True)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))
