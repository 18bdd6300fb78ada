"""``switchyard worker``: the batched engine as a standalone OpenAI-compatible process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from openai import OpenAI

from gateway.cli import _parser
from gateway.worker import worker_config
from tests.conftest import free_port


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
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()
