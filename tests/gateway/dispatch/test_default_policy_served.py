"""With no policy line: two ``shunter worker``s of one model share the sessions and keep
each on the engine holding it; a local model listed before an API still answers first.

The workers are real processes (llama.cpp, the generated tiny GGUF); the API is a
scripted upstream on loopback.
"""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from tests.conftest import start_server, stop_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.gateway.dispatch.test_cached_prefix_served import Messages, ask, session, worker

DEFAULT_NOTE = "; default cached_prefix: 2 interchangeable openai engines"


def test_interchangeable_workers_spread_sessions_and_keep_each_home(
    tiny_model: Path, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        ports = {
            name: stack.enter_context(worker(tiny_model, tmp_path, name, parallel=2, queue=4))
            for name in ("w1", "w2")
        }
        rows = "".join(
            f"  - {{name: {name}, backend: openai, base_url: 'http://127.0.0.1:{port}/v1',"
            " model: w, worker_stats: true}\n"
            for name, port in ports.items()
        )
        config = tmp_path / "gateway.yaml"
        config.write_text(f"deployments:\n{rows}models:\n  agent: {{candidates: [w1, w2]}}\n")
        gateway = start_server(config, tmp_path / "gateway.log")
        stack.callback(stop_server, gateway)
        sessions: dict[str, Messages] = {f"s{i}": session(f"task {i}: fix it") for i in range(4)}
        placed: dict[str, str] = {}
        for turn in range(3):
            for name, messages in sessions.items():
                deployment, route, answer = ask(gateway, messages)
                assert route.endswith(DEFAULT_NOTE), route
                if turn:
                    assert deployment == placed[name], route
                    assert route.split(";")[0].endswith(" home"), route
                placed[name] = deployment
                messages += [
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": f"step {turn}: run the tests again"},
                ]
    assert sorted(Counter(placed.values()).values()) == [2, 2], placed


def test_a_local_model_listed_before_an_api_answers_while_healthy(
    tiny_model: Path, tmp_path: Path
) -> None:
    upstream = ScriptedUpstream(script=[Turn(text="from the api")])
    with upstream:
        config = tmp_path / "config.yaml"
        config.write_text(
            f"""
deployments:
  - {{name: local, backend: llamacpp, model: {tiny_model}, n_ctx: 1024, threads: 1}}
  - {{name: api, backend: openai, base_url: '{upstream.url}', model: scripted}}
models:
  chat: {{candidates: [local, api]}}
"""
        )
        gateway = start_server(config, tmp_path / "gateway.log")
        try:
            answered = [ask(gateway, session(f"question {i}"), model="chat") for i in range(4)]
        finally:
            stop_server(gateway)
    assert [deployment for deployment, _, _ in answered] == ["local"] * 4
    assert not upstream.bodies
    note = "; default first: local, api differ in model"
    assert all(route.endswith(note) for _, route, _ in answered), answered
