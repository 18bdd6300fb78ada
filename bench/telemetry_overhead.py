"""What recording traces costs a request: the same gateway with no exporter (the client's
trace context is only passed through) and with an OTLP/HTTP exporter (a server span, a
client span per attempt, GenAI attributes read from the body and the answer), against the
upstream itself, measured in the same sitting.

Two real ``shunter serve`` processes front one upstream on loopback (the test fixture); the
exporting one sends its spans to a real OTLP receiver (the test's, decoding every export).
Each round, interleaved so that drift on a shared machine hits all three, one whole chat
request carrying a client ``traceparent`` goes to each:

* ``upstream``: straight to the upstream;
* ``no exporter``: through the gateway that records nothing;
* ``exporting``: through the gateway that records and exports.

The medians' differences are what the gateway adds, and what recording adds to that.
``--before DIR`` adds a fourth gateway run from another source tree (an earlier commit,
``git archive COMMIT | tar -x -C DIR``), with no exporter: before against after.

    .venv/bin/python -m bench.telemetry_overhead [--rounds 300] [--before DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.gateway.telemetry.otlp_receiver import OTLPReceiver

BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 16,
    "temperature": 0.2,
}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _gateway(folder: Path, upstream: FaultUpstream, env: dict[str, str]) -> Server:
    config = folder / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: fake-model}}\n"
        "models:\n"
        "  m: {candidates: [up]}\n"
    )
    return start_server(config, folder / "server.log", env=env)


def _timed(client: httpx.Client, url: str) -> float:
    started = time.perf_counter()
    answer = client.post(url, json=BODY, headers={"traceparent": TRACEPARENT})
    elapsed = time.perf_counter() - started
    answer.raise_for_status()
    return elapsed * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--before", type=Path, help="another source tree to compare with")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        FaultUpstream() as upstream,
        OTLPReceiver("http/protobuf") as receiver,
    ):
        plain_dir, traced_dir = Path(tmp, "plain"), Path(tmp, "traced")
        plain_dir.mkdir()
        traced_dir.mkdir()
        plain = _gateway(plain_dir, upstream, {"OTEL_TRACES_EXPORTER": "none"})
        exporting = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        traced = _gateway(traced_dir, upstream, exporting)
        targets = {
            "upstream": f"{upstream.url}/chat/completions",
            "no exporter": f"{plain.api}/chat/completions",
            "exporting": f"{traced.api}/chat/completions",
        }
        servers = [plain, traced]
        if args.before is not None:
            before_dir = Path(tmp, "before")
            before_dir.mkdir()
            # PYTHONSAFEPATH: ``-m`` must not put the working directory (this tree) first
            env = {
                "OTEL_TRACES_EXPORTER": "none",
                "PYTHONPATH": str(args.before.resolve()),
                "PYTHONSAFEPATH": "1",
            }
            servers.append(_gateway(before_dir, upstream, env))
            targets["before"] = f"{servers[-1].api}/chat/completions"
        times: dict[str, list[float]] = {name: [] for name in targets}
        try:
            with httpx.Client(timeout=30) as client:
                for url in targets.values():  # warm connections and code paths
                    for _ in range(10):
                        _timed(client, url)
                for _ in range(args.rounds):
                    for name, url in targets.items():
                        times[name].append(_timed(client, url))
        finally:
            for server in servers:
                stop_server(server)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.rounds} rounds, one whole chat request each, interleaved")
    for name, values in times.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"  {name:12} median {medians[name]:7.3f} ms   p90 {p90:7.3f} ms")
    gateway = medians["no exporter"] - medians["upstream"]
    recording = medians["exporting"] - medians["no exporter"]
    print(f"  the gateway adds {gateway:.3f} ms; recording and exporting adds {recording:.3f} ms")
    if "before" in medians:
        change = medians["no exporter"] - medians["before"]
        print(f"  no exporter, this tree against --before: {change:+.3f} ms")


if __name__ == "__main__":
    main()
