"""``shunter worker``: the batched engine as a standalone OpenAI-compatible process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from openai import OpenAI

from gateway.cli.commands import _parser
from gateway.cli.worker import worker_config
from tests.conftest import free_port, start_server, stop_server


def test_worker_flags_become_one_deployment_and_route(tiny_model: Path) -> None:
    args = _parser().parse_args(
        ["worker", "--model", str(tiny_model), "--parallel", "3", "--ctx", "512", "--threads", "1"]
    )
    config = worker_config(args)
    (deployment,) = config.deployments
    assert deployment.name == "tiny" and list(config.models) == ["tiny"]
    assert deployment.backend == "llamacpp"
    assert (deployment.parallel, deployment.n_ctx, deployment.threads) == (3, 512, 1)


def test_worker_serves_chat_and_live_figures(tiny_model: Path, tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "gateway.cli", "worker", "--model", str(tiny_model)]
    command += ["--parallel", "2", "--ctx", "512", "--threads", "1", "--port", str(port)]
    log = (tmp_path / "worker.log").open("wb")
    process = subprocess.Popen(
        [*command, "--name", "w"], stdout=log, stderr=subprocess.STDOUT, env={**os.environ}
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.poll() is None, (tmp_path / "worker.log").read_text()
            try:
                if httpx.get(f"{base}/health/readiness", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        with OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0) as client:
            out = client.chat.completions.create(
                model="w", messages=[{"role": "user", "content": "hi"}], max_tokens=5
            )
        assert out.usage is not None and out.usage.completion_tokens == 5
        stats = httpx.get(f"{base}/v1/worker/stats").json()
        assert stats["object"] == "worker.stats"
        figures = stats["deployments"]["w"]
        assert figures["slots_total"] == 2 and figures["slots_busy"] == 0
        assert figures["kv_total"] == 2 * 512
        assert figures["decode_tokens_per_s"] > 0
        lines = [json.loads(line) for line in (tmp_path / "worker.log").read_text().splitlines()]
        started = next(line for line in lines if line["event"] == "worker_starting")
        assert (started["model"], started["file"]) == ("w", str(tiny_model.resolve()))
        assert (started["parallel"], started["ctx_per_sequence"], started["threads"]) == (2, 512, 1)
        assert started["url"] == f"{base}/v1" and started["auth"] == "none (loopback only)"
        ready = next(line for line in lines if line["event"] == "gateway_ready")
        assert ready["config"] == f"shunter worker --model {tiny_model}"
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def test_gateway_routes_on_a_workers_live_figures(tiny_model: Path, tmp_path: Path) -> None:
    """A gateway in front of a worker sees the worker's sequences and KV in its own stats."""
    port = free_port()
    command = [sys.executable, "-m", "gateway.cli", "worker", "--model", str(tiny_model)]
    command += ["--parallel", "2", "--ctx", "4096", "--threads", "1", "--port", str(port)]
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen([*command, "--name", "w"], stdout=log, stderr=subprocess.STDOUT)
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: remote, backend: openai, base_url: 'http://127.0.0.1:{port}/v1',"
        " model: w, worker_stats: true}\n"
        "models:\n  m: {candidates: [remote]}\n"
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/readiness", timeout=1).is_success:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    gateway = start_server(config, tmp_path / "gateway.log")
    try:

        def remote_figures() -> dict[str, int]:
            body = httpx.get(f"{gateway.base_url}/health/readiness").json()
            figures: dict[str, int] = body["deployments"]["remote"]
            return figures

        assert remote_figures()["slots_total"] == 2
        assert remote_figures()["kv_total"] == 2 * 4096
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with httpx.stream(
            "POST", f"{gateway.api}/chat/completions", json={**body, "max_tokens": 3000}
        ) as stream:
            lines = stream.iter_lines()  # keep it: a dropped iterator closes the stream
            next(lines)
            busy_seen = False
            until = time.monotonic() + 5
            while not busy_seen and time.monotonic() < until:
                busy_seen = remote_figures()["slots_busy"] == 1
                time.sleep(0.2)
        assert busy_seen
    finally:
        stop_server(gateway)
        worker.terminate()
        worker.wait(timeout=20)
