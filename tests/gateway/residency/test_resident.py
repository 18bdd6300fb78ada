"""Local models on demand: load on first use, unload after keep_alive, LRU eviction under a
memory budget, busy models kept, model-cache names as ``model:``. Real servers with the
tiny generated model, copied into a model cache under three names."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from backends.base import NotSupportedError
from backends.llamacpp.settings import LlamaCppSettings
from gateway.config import ConfigError, parse_config
from gateway.models.demo import ensure_demo_model
from gateway.models.store import resolve_model_path
from gateway.protocol import ChatCompletionRequest
from gateway.residency.placement import plan_deployments
from gateway.residency.resident import ModelLoadError, Residency
from tests.conftest import Server, start_server, stop_server

NAMES = ("alpha", "beta", "gamma")
LOCAL = "backend: llamacpp, n_ctx: 4096, threads: 1, parallel: 2, preload: false"
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache holding the tiny model as ``alpha``, ``beta`` and ``gamma``."""
    tiny = ensure_demo_model(tmp_path_factory.mktemp("generated") / "tiny.gguf", "tiny")
    root = tmp_path_factory.mktemp("model-cache")
    for name in NAMES:
        shutil.copy(tiny, root / f"{name}.gguf")
    return root


@pytest.fixture(scope="module")
def model_bytes(model_dir: Path) -> int:
    """What the memory plan says one of them takes when loaded."""
    settings = LlamaCppSettings(
        name="alpha",
        backend="llamacpp",
        model=str(model_dir / "alpha.gguf"),
        n_ctx=4096,
        parallel=2,
    )
    (placement,) = plan_deployments([settings], [])
    assert placement.plan is not None
    return placement.plan.required_bytes


def serve(tmp_path: Path, model_dir: Path, yaml: str) -> Server:
    config = tmp_path / "shunter.yaml"
    config.write_text(yaml)
    env = {"SHUNTER_MODEL_DIR": str(model_dir)}
    return start_server(config, tmp_path / "server.log", env=env)


@pytest.fixture
def running(tmp_path: Path, model_dir: Path) -> Iterator[Callable[[str], Server]]:
    servers: list[Server] = []

    def start(yaml: str) -> Server:
        servers.append(serve(tmp_path, model_dir, yaml))
        return servers[-1]

    yield start
    for server in servers:
        stop_server(server)


def deployments(server: Server) -> dict[str, dict[str, object]]:
    body = httpx.get(f"{server.base_url}/health/readiness").json()
    found: dict[str, dict[str, object]] = body["deployments"]
    return found


def loaded(server: Server) -> dict[str, object]:
    return {name: d["loaded"] for name, d in deployments(server).items()}


def metrics(server: Server) -> str:
    return httpx.get(f"{server.base_url}/metrics").text


def wait_until(check: Callable[[], bool], server: Server, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout_s}s:\n{server.log()}")
        time.sleep(0.05)


def chat(server: Server, model: str) -> str:
    """One short chat through the openai SDK; returns the deployment that answered."""
    with OpenAI(base_url=server.api, api_key="unused", max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert raw.parse().choices[0].message.role == "assistant"
    return raw.headers["x-shunter-deployment"]


def test_loads_on_first_use_and_unloads_after_keep_alive(
    running: Callable[[str], Server],
) -> None:
    server = running(
        f"""
deployments:
  - {{name: alpha, model: alpha, keep_alive: 0.3, {LOCAL}}}
models:
  alpha: {{candidates: [alpha]}}
"""
    )
    assert loaded(server) == {"alpha": False}  # ready, yet nothing loaded

    with ThreadPoolExecutor(3) as pool:  # concurrent first requests share one load
        assert list(pool.map(lambda _: chat(server, "alpha"), range(3))) == ["alpha"] * 3
    assert server.log().count('"model_loaded"') == 1

    body = {"model": "alpha", "messages": HELLO, "max_tokens": 4000, "stream": True}
    with httpx.stream("POST", f"{server.api}/chat/completions", json=body, timeout=60) as stream:
        lines = stream.iter_lines()  # kept: a dropped iterator closes the connection
        next(lines)
        time.sleep(0.6)  # past keep_alive, but a stream is in flight
        assert loaded(server) == {"alpha": True}
        # read while the stream holds the model: keep_alive is too short to read it after
        assert 'shunter_model_loaded{deployment="alpha"} 1.0' in metrics(server)
    idle_since = time.monotonic()
    wait_until(lambda: loaded(server) == {"alpha": False}, server)
    assert time.monotonic() - idle_since >= 0.2
    assert '"reason": "idle"' in server.log()
    assert 'shunter_model_loaded{deployment="alpha"} 0.0' in metrics(server)

    assert chat(server, "alpha") == "alpha"  # loads again
    assert server.log().count('"model_loaded"') == 2
    assert deployments(server)["alpha"]["in_flight"] == 0


def test_memory_budget_evicts_the_least_recently_used(
    running: Callable[[str], Server], model_bytes: int
) -> None:
    server = running(
        f"""
local_models: {{memory_budget: {int(model_bytes * 2.5)}}}   # room for two of the three
deployments:
  - {{name: alpha, model: alpha, {LOCAL}}}
  - {{name: beta, model: beta, {LOCAL}}}
  - {{name: gamma, model: gamma, {LOCAL}}}
models:
  alpha: {{candidates: [alpha]}}
  beta: {{candidates: [beta]}}
  gamma: {{candidates: [gamma]}}
"""
    )
    chat(server, "alpha")
    chat(server, "beta")
    assert loaded(server) == {"alpha": True, "beta": True, "gamma": False}
    chat(server, "alpha")  # beta is now the least recently used
    chat(server, "gamma")
    assert loaded(server) == {"alpha": True, "beta": False, "gamma": True}
    chat(server, "beta")  # and now alpha is
    assert loaded(server) == {"alpha": False, "beta": True, "gamma": True}
    assert "evicted for beta" in server.log()


def test_a_busy_model_is_not_evicted(running: Callable[[str], Server], model_bytes: int) -> None:
    server = running(
        f"""
local_models: {{memory_budget: {int(model_bytes * 1.5)}}}   # room for one
deployments:
  - {{name: alpha, model: alpha, {LOCAL}}}
  - {{name: beta, model: beta, {LOCAL}}}
models:
  alpha: {{candidates: [alpha]}}
  beta: {{candidates: [beta]}}
  beta-or-alpha: {{candidates: [beta, alpha]}}
reliability: {{retries: 0, failure_threshold: 10}}
"""
    )
    body = {"model": "alpha", "messages": HELLO, "max_tokens": 4000, "stream": True}
    with httpx.stream("POST", f"{server.api}/chat/completions", json=body, timeout=60) as stream:
        lines = stream.iter_lines()  # kept: a dropped iterator closes the connection
        next(lines)
        refused = httpx.post(
            f"{server.api}/chat/completions",
            json={"model": "beta", "messages": HELLO, "max_tokens": 2},
        )
        assert refused.status_code == 503
        error = refused.json()["error"]
        assert error["code"] == "model_cannot_fit"
        assert error["type"] == "service_unavailable"
        assert "models in use (alpha)" in error["message"]
        assert "memory_budget" in error["message"]
        assert chat(server, "beta-or-alpha") == "alpha"  # the next candidate answers
        assert loaded(server) == {"alpha": True, "beta": False}
    wait_until(lambda: deployments(server)["alpha"]["in_flight"] == 0, server)
    assert chat(server, "beta") == "beta"  # alpha is idle now: evicted
    assert loaded(server) == {"alpha": False, "beta": True}


async def test_a_failed_load_is_a_503_and_the_next_request_tries_again(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHUNTER_MODEL_DIR", str(tmp_path))
    (tmp_path / "broken.gguf").write_bytes(b"not a model")
    settings = LlamaCppSettings(
        name="broken", backend="llamacpp", model="broken", preload=False, threads=1, n_ctx=256
    )
    residency = Residency()
    backend = residency.create(settings)
    request = ChatCompletionRequest.model_validate(
        {"model": "broken", "messages": HELLO, "max_tokens": 2}
    )
    try:
        await backend.start()  # the name resolves; nothing is loaded yet
        with pytest.raises(ModelLoadError) as info:
            await backend.chat(request)
        assert info.value.status_code == 503
        assert info.value.code == "model_load_failed"
        assert "'broken': model failed to load" in info.value.message
        assert str(tmp_path) not in info.value.message  # the path is for the log only
        assert backend.stats().loaded is False

        shutil.copy(model_dir / "alpha.gguf", tmp_path / "broken.gguf")
        reply = await backend.chat(request)
        assert reply.choices[0].message.role == "assistant"
        assert backend.stats().loaded is True
    finally:
        await backend.aclose()
    assert backend.stats().loaded is False


async def test_an_unknown_model_fails_at_start_even_without_preload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHUNTER_MODEL_DIR", str(tmp_path))
    settings = LlamaCppSettings(name="typo", backend="llamacpp", model="qwen-typo", preload=False)
    backend = Residency().create(settings)
    with pytest.raises(FileNotFoundError, match=r"deployment .typo.*shunter pull"):
        await backend.start()
    await backend.aclose()


def test_model_takes_a_cache_name(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHUNTER_MODEL_DIR", str(model_dir))
    assert resolve_model_path("beta") == model_dir / "beta.gguf"
    assert resolve_model_path(str(model_dir / "gamma.gguf")) == model_dir / "gamma.gguf"
    with pytest.raises(FileNotFoundError, match=r"neither in the cache .* nor a file"):
        resolve_model_path("delta")
    with pytest.raises(ValueError, match="use demo:tiny or demo:bench"):
        resolve_model_path("demo:huge")


def test_durations_and_sizes_parse() -> None:
    config = parse_config(
        """
local_models: {memory_budget: 6GiB}
deployments:
  - {name: a, backend: llamacpp, model: a, keep_alive: 5m}
  - {name: b, backend: llamacpp, model: b, keep_alive: 500ms, preload: false}
  - {name: c, backend: llamacpp, model: c, keep_alive: 30}
  - {name: d, backend: llamacpp, model: d}
models:
  m: {candidates: [a, b, c, d]}
""",
        "ok.yaml",
    )
    assert config.local_models.memory_budget == 6 * 2**30
    keep = [getattr(d, "keep_alive", None) for d in config.deployments]
    assert keep == [300.0, 0.5, 30.0, None]
    assert [getattr(d, "preload", None) for d in config.deployments] == [True, False, True, True]


def test_bad_keep_alive_and_budget_name_file_line_and_field() -> None:
    text = """deployments:
  - name: a
    backend: llamacpp
    model: a
    keep_alive: 5 minutes
models:
  m: {candidates: [a]}
local_models:
  memory_budget: lots
  evict: always
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text, "models.yaml")
    found = {issue.field: str(issue) for issue in info.value.issues}
    assert set(found) == {
        "deployments.0.keep_alive",
        "local_models.memory_budget",
        "local_models.evict",
    }
    assert found["deployments.0.keep_alive"].startswith("models.yaml:5: deployments.0.keep_alive: ")
    assert "'5 minutes' is not a duration" in found["deployments.0.keep_alive"]
    assert found["local_models.memory_budget"].startswith("models.yaml:9: ")
    assert found["local_models.evict"].startswith("models.yaml:10: ")


async def test_an_unloaded_model_says_what_its_engine_answers() -> None:
    """Before any load, the deployment's abilities are its engine's: embeddings only from an
    embedding model; raw frames and native Messages from neither (refused if asked)."""
    residency = Residency()
    for task, embeds in (("generate", False), ("embed", True)):
        settings = LlamaCppSettings(backend="llamacpp", name=task, model="demo:tiny", task=task)
        resident = residency.create(settings)
        capabilities = resident.capabilities
        assert capabilities.embeddings is embeds and capabilities.count_tokens
        assert not capabilities.chat_stream_raw and not capabilities.native_apis
        with pytest.raises(NotSupportedError):
            await resident.native("messages", b"{}")
        assert resident.stats().loaded is False
