"""The load generator against the real `shunter serve` (tiny model) and a faulty upstream."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from gateway.cli import main
from gateway.loadgen import (
    Bounds,
    Distribution,
    Endpoint,
    Level,
    LevelSummary,
    RequestResult,
    Slo,
    Workload,
    render_table,
    run_level,
    summarize,
)
from gateway.loadgen.runner import new_client
from tests.conftest import Server
from tests.fixtures.fault_upstream import FaultUpstream

MODEL = "tiny"
OUTPUT_TOKENS = 4


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with new_client(30.0) as http:
        yield http


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


def small_workload(**overrides: float) -> Workload:
    return Workload(
        prompt_tokens=Distribution("uniform", 2, 8),
        output_tokens=Distribution("fixed", OUTPUT_TOKENS),
        shared_prefix_ratio=overrides.get("shared_prefix_ratio", 0.0),
        shared_prefix_tokens=16,
        seed=7,
    )


def assert_consistent(summary: LevelSummary, requests: int) -> None:
    assert summary.requests == requests
    assert summary.completed + summary.failed == summary.requests
    assert sum(summary.errors.values()) == summary.failed
    assert 0 <= summary.goodput <= summary.completed
    assert summary.duration_s > 0
    assert summary.request_throughput == pytest.approx(summary.completed / summary.duration_s)
    assert summary.output_throughput == pytest.approx(summary.output_tokens / summary.duration_s)
    for stats in (summary.ttft_ms, summary.tpot_ms, summary.itl_ms, summary.e2e_ms):
        if stats is not None:
            assert 0 <= stats.p50 <= stats.p90 <= stats.p99
    if summary.ttft_ms is not None and summary.e2e_ms is not None:
        assert summary.ttft_ms.p50 <= summary.e2e_ms.p50


async def test_concurrency_level_against_the_server(
    server: Server, client: httpx.AsyncClient
) -> None:
    seen: list[RequestResult] = []
    run = await run_level(
        client,
        Endpoint(server.base_url, MODEL),
        small_workload(shared_prefix_ratio=0.5),
        Level("concurrency", 2),
        Bounds(max_requests=4),
        on_result=seen.append,
    )
    assert len(run.results) == len(seen) == 4
    assert [r.index for r in run.results] == list(range(4))
    for result in run.results:
        assert result.ok, result.detail
        assert result.usage_reported
        assert result.output_tokens == OUTPUT_TOKENS  # the demo model runs to max_tokens
        assert result.prompt_tokens is not None and result.prompt_tokens > 0
        assert result.ttft_s is not None and 0 < result.ttft_s <= result.e2e_s
        assert result.tpot_s is not None and result.tpot_s > 0
        assert len(result.itl_s) <= OUTPUT_TOKENS - 1
    summary = summarize(run, Slo(ttft_ms=60_000, tpot_ms=0.001))
    assert_consistent(summary, 4)
    assert summary.completed == 4 and summary.errors == {}
    assert summary.output_tokens == 4 * OUTPUT_TOKENS
    assert summary.usage_reported == 4
    assert summary.goodput == 0  # nobody makes a 1 µs TPOT
    assert summarize(run).goodput == 4  # no objectives: every success counts


async def test_no_stream_mode(server: Server, client: httpx.AsyncClient) -> None:
    run = await run_level(
        client,
        Endpoint(f"{server.base_url}/v1", MODEL, stream=False),
        small_workload(),
        Level("concurrency", 1),
        Bounds(max_requests=2),
    )
    for result in run.results:
        assert result.ok and result.usage_reported
        assert result.output_tokens == OUTPUT_TOKENS
        assert result.ttft_s == result.e2e_s and result.tpot_s is None
    assert_consistent(summarize(run), 2)


async def test_poisson_rate_respects_max_requests(
    server: Server, client: httpx.AsyncClient
) -> None:
    run = await run_level(
        client,
        Endpoint(server.api, MODEL),
        small_workload(),
        Level("rate", 40.0),
        Bounds(duration_s=30, max_requests=4),
    )
    assert len(run.results) == 4
    assert run.duration_s < 30
    starts = [r.start_s for r in run.results]
    assert starts == sorted(starts) and starts[0] < 0.05  # the first arrival goes at once
    assert_consistent(summarize(run), 4)


async def test_rate_stops_at_duration(upstream: FaultUpstream, client: httpx.AsyncClient) -> None:
    run = await run_level(
        client,
        Endpoint(upstream.url, "echo"),
        small_workload(),
        Level("rate", 50.0),
        Bounds(duration_s=0.4, max_requests=1000),
    )
    assert 3 <= len(run.results) < 100
    assert all(r.start_s < 0.4 + 0.3 for r in run.results)  # scheduling slack on busy CI
    assert all(r.ok for r in run.results)


async def test_error_kinds(upstream: FaultUpstream, client: httpx.AsyncClient) -> None:
    async def one(model: str, timeout_s: float = 10.0) -> RequestResult:
        endpoint = Endpoint(upstream.url, model, api_key="sk-test", timeout_s=timeout_s)
        run = await run_level(
            client, endpoint, small_workload(), Level("concurrency", 1), Bounds(max_requests=1)
        )
        return run.results[0]

    assert (await one("fault:503")).error == "http_503"
    assert (await one("fault:429")).error == "http_429"
    assert (await one("fault:error:3")).error == "stream_error"
    assert (await one("fault:cut:3")).error == "connection"
    assert (await one("fault:nodone:3")).error == "incomplete"
    assert (await one("fault:hang", timeout_s=0.3)).error == "timeout"
    assert upstream.last().headers["authorization"] == "Bearer sk-test"
    no_usage = await one("fault:nousage")
    assert no_usage.ok and not no_usage.usage_reported
    assert no_usage.output_tokens == len(no_usage.itl_s) + 1 > 1  # counted from the chunks
    body = upstream.last().body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == OUTPUT_TOKENS


async def test_summary_counts_errors_by_kind(
    upstream: FaultUpstream, client: httpx.AsyncClient
) -> None:
    upstream.queue.extend(["503", None, "error:2", "503"])
    run = await run_level(
        client,
        Endpoint(upstream.url, "queued"),
        small_workload(),
        Level("concurrency", 1),
        Bounds(max_requests=4),
    )
    summary = summarize(run)
    assert_consistent(summary, 4)
    assert summary.errors == {"http_503": 2, "stream_error": 1}
    assert summary.completed == 1
    assert summary.first_error is not None and summary.first_error.startswith("http_503")
    table = render_table([summary])
    assert table.row_count == 1


def test_cli_sweep_json(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--url", server.base_url, "--model", MODEL, "--concurrency", "1,2"]
    argv += ["--max-requests", "2", "--prompt-tokens", "4", "--output-tokens", "3", "--json"]
    assert main([*argv, "--slo-ttft-ms", "60000", "--seed", "1"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [level["level"] for level in document["levels"]] == ["c=1", "c=2"]
    assert document["slo"] == {"ttft_ms": 60000.0, "tpot_ms": None}
    for level in document["levels"]:
        assert level["requests"] == level["completed"] == 2
        assert level["output_tokens"] == 2 * 3
        assert level["goodput"] <= level["completed"]
        ttft = level["ttft_ms"]
        assert ttft["p50"] <= ttft["p90"] <= ttft["p99"]


def test_cli_table_and_plot(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "sweep.png"
    argv = ["bench", "--url", server.api, "--model", MODEL, "--concurrency", "1,2"]
    argv += ["--max-requests", "1", "--prompt-tokens", "4", "--output-tokens", "3"]
    argv += ["--plot", str(plot)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "c=1" in out and "c=2" in out and "TTFT" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gateway.loadgen.plot import PlotUnavailableError, plot_sweep

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotUnavailableError, match="matplotlib"):
        plot_sweep([], tmp_path / "x.png")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "unbounded"),
        (["--max-requests", "1", "--concurrency", "2", "--rate", "1"], "not both"),
        (["--max-requests", "1", "--prompt-tokens", "uniform:9-3"], "distribution"),
        (["--max-requests", "1", "--extra-body", "[1]"], "JSON object"),
    ],
)
def test_cli_refuses_bad_plans(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--url", "http://127.0.0.1:9", "--model", "m", *extra]) == 2
    assert message in capsys.readouterr().err


def test_cli_says_how_far_it_is_while_it_runs(upstream: FaultUpstream) -> None:
    """Not on a terminal (a pipe, a log), each level's progress comes as plain lines."""
    argv = ["bench", "--url", upstream.url, "--model", "m", "--concurrency", "1"]
    argv += ["--duration", "12", "--prompt-tokens", "4", "--output-tokens", "3"]
    command = [sys.executable, "-m", "gateway.cli", *argv]
    bench = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert bench.stderr is not None
        first = bench.stderr.readline()
        running = bench.poll() is None  # the level lasts 12 s: this line came before its end
        _, rest = bench.communicate(timeout=120)
    finally:
        bench.kill()
    assert running and first.startswith("c=1: started (up to 12 s)"), first
    lines = rest.splitlines()
    assert any(re.fullmatch(r"c=1: \d+ done, 0 errors, \d+ s", line) for line in lines), rest
    assert re.fullmatch(r"c=1: finished, \d+ done, 0 errors, \d+ s", lines[-1]), rest
    assert bench.returncode == 0


def test_cli_all_failed_exits_1(
    upstream: FaultUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "--url", upstream.url, "--model", "fault:500", "--max-requests", "2"]
    assert main([*argv, "--extra-body", '{"temperature": 0}']) == 1
    captured = capsys.readouterr()
    assert "http_500:2" in captured.out
    assert upstream.last().body["temperature"] == 0
