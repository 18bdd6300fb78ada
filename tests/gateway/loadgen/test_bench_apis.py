"""The load generator drives ``/v1/responses`` and ``/v1/messages`` of a real `shunter serve`
(the tiny model), streamed and whole, as it drives chat."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.cli import main
from gateway.loadgen import Bounds, Distribution, Endpoint, Level, Workload, run_level, summarize
from gateway.loadgen.runner import new_client
from tests.conftest import Server

OUTPUT_TOKENS = 4


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with new_client(30.0) as http:
        yield http


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("api", ["responses", "messages"])
async def test_each_api_is_timed_with_its_usage(
    server: Server, client: httpx.AsyncClient, api: str, stream: bool
) -> None:
    workload = Workload(
        prompt_tokens=Distribution("uniform", 2, 8),
        output_tokens=Distribution("fixed", OUTPUT_TOKENS),
        shared_prefix_ratio=0.5,
        shared_prefix_tokens=16,
        seed=3,
    )
    endpoint = Endpoint(server.base_url, "tiny", "sk-any", stream=stream, api=api)  # type: ignore[arg-type]
    assert endpoint.chat_url == f"{server.base_url}/v1/{api}"
    run = await run_level(
        client, endpoint, workload, Level("concurrency", 2), Bounds(max_requests=3)
    )
    for result in run.results:
        assert result.ok, result.detail
        assert result.usage_reported and result.output_tokens == OUTPUT_TOKENS
        assert result.prompt_tokens is not None and result.prompt_tokens > 0
        assert result.ttft_s is not None and 0 < result.ttft_s <= result.e2e_s
        if stream:
            assert result.tpot_s is not None and result.tpot_s > 0
    assert summarize(run).completed == 3


def test_cli_api_flag(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--url", server.base_url, "--model", "tiny", "--api", "messages"]
    argv += ["--max-requests", "2", "--prompt-tokens", "4", "--output-tokens", "3", "--json"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["api"] == "messages" and document["url"].endswith("/v1/messages")
    assert document["levels"][0]["completed"] == 2
    assert document["levels"][0]["output_tokens"] == 2 * 3
