"""A sequence's KV cache moved between two real ``shunter worker`` processes over their KV
endpoints (``GET /v1/worker/kv/{link}``, ``PUT /v1/worker/kv``), by the deployments a
gateway has in front of them (the OpenAI-compatible backend with ``worker_stats``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.kv import KV_MEDIA_TYPE, KvHeader, encode_header
from backends.openai import OpenAICompatBackend, OpenAICompatSettings
from gateway.models.demo import write_demo_model
from tests.conftest import free_port
from tests.waiting import eventually

KEY = "sk-master-kv-test"
AUTH = {"authorization": f"Bearer {KEY}"}
SYSTEM = "You are a careful assistant for the Shunter test suite. " * 8


@contextmanager
def worker(model: Path, log: Path, *args: str) -> Iterator[str]:
    """A ``shunter worker`` serving ``model`` as ``w`` behind the master key; its URL."""
    port = free_port()
    command = [sys.executable, "-m", "gateway.cli", "worker", "--model", str(model)]
    command += ["--name", "w", "--parallel", "2", "--ctx", "1024", "--threads", "1"]
    env = {**os.environ, "SHUNTER_MASTER_KEY": KEY, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--port", str(port), *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while _fingerprint(base) is None:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=20)


def _fingerprint(base: str) -> str | None:
    try:
        answer = httpx.get(f"{base}/v1/worker/stats", headers=AUTH, timeout=1)
    except httpx.TransportError:
        return None
    if answer.status_code != 200:
        return None
    found: str | None = answer.json()["deployments"]["w"]["kv_fingerprint"]
    return found


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workers' models and logs (``NAME.log``)."""
    return tmp_path_factory.mktemp("kv")


@pytest.fixture(scope="module")
def fleet(folder: Path) -> Iterator[dict[str, str]]:
    """Workers ``a`` and ``b`` alike (``b`` gives request bodies 1 s); ``flash_off``
    computes otherwise; ``other`` serves a model of other weights."""
    tiny = write_demo_model(folder / "tiny.gguf", "tiny")
    other = write_demo_model(folder / "other.gguf", "tiny", seed=1)
    plan: dict[str, tuple[Path, tuple[str, ...]]] = {
        "a": (tiny, ()),
        "b": (tiny, ("--body-timeout", "1s")),
        "flash_off": (tiny, ("--flash-attn", "off")),
        "other": (other, ()),
    }
    with ExitStack() as stack:
        yield {
            name: stack.enter_context(worker(model, folder / f"{name}.log", *args))
            for name, (model, args) in plan.items()
        }


def _chat(base: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    body = {"model": "w", "messages": messages, "max_tokens": 24, "temperature": 0}
    answer = httpx.post(f"{base}/v1/chat/completions", json=body, headers=AUTH, timeout=60)
    assert answer.status_code == 200, answer.text
    out: dict[str, Any] = answer.json()
    return out


def _figures(base: str) -> dict[str, Any]:
    stats = httpx.get(f"{base}/v1/worker/stats", headers=AUTH).json()
    figures: dict[str, Any] = stats["deployments"]["w"]
    return figures


def _deepest(base: str) -> str:
    held = _figures(base)["held_prefixes"]
    return str(max(held, key=lambda link: held[link]))


def _deployment(name: str, base: str) -> OpenAICompatBackend:
    settings = OpenAICompatSettings.model_validate(
        {
            "name": name,
            "backend": "openai",
            "base_url": f"{base}/v1",
            "model": "w",
            "api_key_env": "KV_TEST_KEY",
            "worker_stats": True,
        }
    )
    return OpenAICompatBackend(settings)


def _export(base: str, link: str) -> bytes:
    answer = httpx.get(f"{base}/v1/worker/kv/{link}", headers=AUTH, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == KV_MEDIA_TYPE
    return answer.content


def _put(base: str, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    sent = {**AUTH, "content-type": KV_MEDIA_TYPE, **(headers or {})}
    return httpx.put(f"{base}/v1/worker/kv", content=body, headers=sent, timeout=30)


async def test_the_next_turn_on_the_other_worker_is_served_from_moved_kv(
    fleet: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, away = fleet["a"], fleet["b"]
    monkeypatch.setenv("KV_TEST_KEY", KEY)
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Go on"}]
    answer = _chat(home, first)["choices"][0]["message"]["content"]
    link = _deepest(home)
    source, target = _deployment("a", home), _deployment("b", away)
    await source.start()
    await target.start()
    try:
        assert target.capabilities.kv_move
        assert source.stats().kv_fingerprint == target.stats().kv_fingerprint is not None
        header, chunks = await source.export_kv(link)
        done = await target.import_kv(header, chunks)
    finally:
        await source.aclose()
        await target.aclose()
    assert (done.tokens, done.bytes) == (len(header.tokens), header.n_bytes)
    assert link in _figures(away)["held_prefixes"]

    second = [*first, {"role": "assistant", "content": answer}]
    second.append({"role": "user", "content": "And then?"})
    hits = _figures(away)["prefix_hit_tokens"]
    at_home, moved = _chat(home, second), _chat(away, second)
    assert moved["choices"][0]["message"] == at_home["choices"][0]["message"]
    cached = moved["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == at_home["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= len(header.tokens) // 2
    assert _figures(away)["prefix_hit_tokens"] - hits == cached


def _raw_put(base: str, length: int, body: bytes, *, answer: bool) -> bytes:
    """A ``PUT /v1/worker/kv`` declaring ``length`` bytes and sending ``body``; the answer's
    status line, or nothing (``answer`` false: the connection is closed at once)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = (
            f"PUT /v1/worker/kv HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {KEY}\r\n"
            f"content-type: {KV_MEDIA_TYPE}\r\ncontent-length: {length}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        return sock.recv(4096).partition(b"\r\n")[0] if answer else b""


def test_a_state_from_an_engine_that_computes_otherwise_is_refused(
    fleet: dict[str, str],
) -> None:
    _chat(fleet["a"], [{"role": "user", "content": SYSTEM}])
    state = _export(fleet["a"], _deepest(fleet["a"]))
    for name, part in (("flash_off", "flash_attn: auto != off"), ("other", "model_sha256")):
        refused = _put(fleet[name], state)
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "kv_mismatch" and part in error["message"]
        assert _figures(fleet[name])["held_prefixes"] == {}


def test_an_import_cut_half_way_leaves_both_workers_serving(fleet: dict[str, str]) -> None:
    source, target = fleet["a"], fleet["flash_off"]
    _chat(source, [{"role": "user", "content": SYSTEM + " cut"}])
    link = _deepest(source)
    state = _export(source, link)
    before = _figures(fleet["b"])["held_prefixes"]
    _raw_put(fleet["b"], len(state), state[: len(state) // 2], answer=False)
    assert _figures(fleet["b"])["held_prefixes"] == before
    for base in (source, fleet["b"], target):
        assert _chat(base, [{"role": "user", "content": "still there?"}])["choices"]
    assert _export(source, link) == state  # the source is untouched
    deadline = time.monotonic() + 30
    while (whole := _put(fleet["b"], state)).status_code == 503:  # the cut one still ending
        assert time.monotonic() < deadline, whole.text
        time.sleep(0.05)
    assert whole.status_code == 200 and link in _figures(fleet["b"])["held_prefixes"]


def test_the_kv_endpoints_need_the_master_key_and_bound_the_state(fleet: dict[str, str]) -> None:
    base = fleet["b"]
    assert httpx.get(f"{base}/v1/worker/kv/x").status_code == 401
    assert httpx.put(f"{base}/v1/worker/kv", content=b"x").status_code == 401
    missing = httpx.get(f"{base}/v1/worker/kv/nothing-holds-this", headers=AUTH)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "kv_not_found"

    _chat(fleet["a"], [{"role": "user", "content": SYSTEM + " large"}])
    state = _export(fleet["a"], _deepest(fleet["a"]))
    line, _, _ = state.partition(b"\n")
    header = KvHeader.model_validate_json(line)
    huge = encode_header(header.model_copy(update={"n_bytes": 3 << 30}))
    too_large = _put(base, huge)
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "kv_too_large"
    assert _raw_put(base, 5 << 30, b"", answer=True) == b"HTTP/1.1 413 Request Entity Too Large"


def test_an_import_may_take_longer_than_a_json_body(fleet: dict[str, str]) -> None:
    """``b`` gives bodies 1 s; its KV import gets ``kv_move_timeout_s`` instead."""
    _chat(fleet["a"], [{"role": "user", "content": SYSTEM + " slow"}])
    link = _deepest(fleet["a"])
    state = _export(fleet["a"], link)
    host, port = fleet["b"].removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = (
            f"PUT /v1/worker/kv HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {KEY}\r\n"
            f"content-type: {KV_MEDIA_TYPE}\r\ncontent-length: {len(state)}\r\n\r\n"
        )
        sock.sendall(head.encode() + state[:100])
        time.sleep(1.5)  # past the server's body deadline
        sock.sendall(state[100:])
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
    assert link in _figures(fleet["b"])["held_prefixes"]


def test_every_move_and_refusal_writes_its_access_line(fleet: dict[str, str], folder: Path) -> None:
    _chat(fleet["a"], [{"role": "user", "content": SYSTEM + " logged"}])
    link = _deepest(fleet["a"])
    assert _put(fleet["b"], _export(fleet["a"], link)).status_code == 200
    assert httpx.get(f"{fleet['b']}/v1/worker/kv/x").status_code == 401

    def lines(name: str) -> list[dict[str, Any]]:
        text = (folder / f"{name}.log").read_text()
        found = [json.loads(t) for t in text.splitlines() if t.startswith("{")]
        return [r for r in found if r.get("event") == "request" and "/kv" in r.get("path", "")]

    assert eventually(lambda: any(r["path"] == f"/v1/worker/kv/{link}" for r in lines("a")))
    exported = [r for r in lines("a") if r["path"] == f"/v1/worker/kv/{link}"][-1]
    assert (exported["method"], exported["status"]) == ("GET", 200)
    assert eventually(lambda: any(r["method"] == "PUT" for r in lines("b")))
    assert [r["status"] for r in lines("b") if r["method"] == "PUT"][-1] == 200
    assert eventually(lambda: any(r["status"] == 401 for r in lines("b")))
    assert all("Bearer" not in json.dumps(r) for r in lines("a") + lines("b"))
