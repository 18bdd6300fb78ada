"""Claude Code, Codex and Gemini CLI, installed from npm, complete a tool loop through the
gateway.

Each CLI runs with its defaults (its own default model, no ``--model``): only the base URL,
a key and leave to run its shell tool. Behind the gateway, that model is served by a
scripted upstream on loopback (:mod:`tests.fixtures.agent_upstream`) behind an ``openai``
deployment (chat completions) or an ``anthropic`` one (Messages), and for Gemini CLI a
``gemini`` one too (Google's API, passed through): it asks to run a command
whose output differs from its text, then answers quoting the tool's output, so the answer
holds the marker only if the CLI ran the command and the gateway carried both turns.

Each CLI first runs straight against the scripted upstream (no gateway): that run learns
its default model's name and shows the harness works without the gateway.

Opt-in: ``SHUNTER_AGENTS=1`` and the CLIs installed (``scripts/test-agents.sh`` does both).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.agents.clis import (
    CLAUDE_CODES,
    Run,
    agents_bin,
    package_version,
    run_claude,
    run_codex,
    run_gemini,
)
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.agent_turns import Script
from tests.fixtures.agent_upstream import AgentUpstream
from tests.fixtures.agent_wire import CALL_ID, SIGNATURE

pytestmark = [
    pytest.mark.agents,
    pytest.mark.skipif(os.environ.get("SHUNTER_AGENTS") != "1", reason="set SHUNTER_AGENTS=1"),
]

Runner = Callable[[str, Path], Run]


@dataclass(frozen=True)
class Marked:
    """A script whose command prints :attr:`printed`, a string its own text does not hold."""

    script: Script
    printed: str


def marked() -> Marked:
    number = random.randrange(10**6, 10**7)
    return Marked(Script(f"echo shunter-$(({number}+1))-marker"), f"shunter-{number + 1}-marker")


@dataclass(frozen=True)
class Direct:
    run: Run
    printed: str
    model: str
    posted: list[Any]
    package: str = ""  # the npm folder of the Claude Code that ran


def _direct(runner: Runner, path: str, home: Path) -> Direct:
    if not all(package_version(p) for p in CLAUDE_CODES) or not agents_bin("codex").exists():
        pytest.fail("the agent CLIs are not installed: run scripts/test-agents.sh")
    mark = marked()
    with AgentUpstream(mark.script) as upstream:
        base = upstream.url + ("/v1" if path == "/v1/responses" else "")
        run = runner(base, home)
    posted = upstream.posted(path)
    model = posted[0]["model"] if posted else ""
    return Direct(run, mark.printed, model, posted)


@pytest.fixture(scope="module", params=CLAUDE_CODES, ids=["pinned", "newest"])
def claude_direct(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Direct:
    """Claude Code straight against the scripted upstream, in the pinned version and in the
    newest, each from its own npm folder."""
    package: str = request.param

    def run(base_url: str, home: Path) -> Run:
        return run_claude(base_url, home, package)

    direct = _direct(run, "/v1/messages", tmp_path_factory.mktemp("claude-direct"))
    return replace(direct, package=package)


@pytest.fixture(scope="module")
def codex_direct(tmp_path_factory: pytest.TempPathFactory) -> Direct:
    return _direct(run_codex, "/v1/responses", tmp_path_factory.mktemp("codex-direct"))


def test_claude_code_runs_its_tool_against_the_scripted_upstream(claude_direct: Direct) -> None:
    assert claude_direct.printed in claude_direct.run.stdout, str(claude_direct.run)
    assert len(claude_direct.posted) >= 2  # the tool call, then the answer


def test_codex_runs_its_tool_against_the_scripted_upstream(codex_direct: Direct) -> None:
    assert codex_direct.printed in codex_direct.run.stdout, str(codex_direct.run)
    assert len(codex_direct.posted) >= 2


def _deployment(kind: str, upstream_url: str) -> str:
    if kind == "openai":
        where = f"backend: openai, base_url: '{upstream_url}/v1'"
    elif kind == "gemini":
        where = f"backend: gemini, base_url: '{upstream_url}'"
    else:
        where = f"backend: anthropic, base_url: '{upstream_url}'"
    return f"{{name: scripted, {where}, model: scripted-model, api_key_env: SCRIPTED_UPSTREAM_KEY}}"


@dataclass(frozen=True)
class Gateway:
    server: Server
    upstream: AgentUpstream
    kind: str

    def turns(self) -> list[Any]:
        """The bodies the gateway sent the scripted model, on its deployment's wire."""
        wires = {
            "openai": "/v1/chat/completions",
            "anthropic": "/v1/messages",
            "gemini": "/v1beta/models/scripted-model:streamGenerateContent",
        }
        return self.upstream.posted(wires[self.kind])

    def explain(self, run: Run) -> str:
        """What the CLI said, what reached the upstream and the gateway's log, for a failure."""
        reached = [f"{r.method} {r.target}" for r in self.upstream.requests]
        return f"{run}\n--- upstream saw\n{reached}\n--- gateway log\n{self.server.log()[-6000:]}"


@contextlib.contextmanager
def gateway(kind: str, model: str, mark: Marked, folder: Path) -> Iterator[Gateway]:
    """``shunter serve`` with ``model`` served by the scripted upstream behind a ``kind``."""
    with AgentUpstream(mark.script) as upstream:
        config = folder / "shunter.yaml"
        config.write_text(
            f"deployments:\n  - {_deployment(kind, upstream.url)}\n"
            f"models:\n  '{model}': {{candidates: [scripted]}}\n"
        )
        env = {"SCRIPTED_UPSTREAM_KEY": "sk-upstream"}
        server = start_server(config, folder / "gateway.log", env=env)
        try:
            yield Gateway(server, upstream, kind)
        finally:
            stop_server(server)


def session_statuses(server: Server) -> dict[str, list[int]]:
    """The statuses of the gateway's access-log lines for Messages requests, per session."""
    sessions: dict[str, list[int]] = {}
    for line in server.log().splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        if entry.get("event") == "request" and entry.get("path") == "/v1/messages":
            sessions.setdefault(entry.get("session", ""), []).append(entry["status"])
    return sessions


def assert_no_400(through: Gateway, run: Run) -> None:
    """The CLI's session reached the gateway and none of its requests was refused."""
    sessions = session_statuses(through.server)
    assert sessions, through.explain(run)
    assert all(400 not in statuses for statuses in sessions.values()), through.explain(run)


def _deferred(bodies: list[Any]) -> set[str]:
    """The names of the tools a Messages or chat body offers with ``defer_loading``."""
    return {
        tool.get("name") or tool.get("function", {}).get("name")
        for body in bodies
        for tool in body.get("tools") or []
        if tool.get("defer_loading") or tool.get("function", {}).get("defer_loading")
    }


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_claude_code_completes_a_tool_loop_through_the_gateway(
    kind: str, claude_direct: Direct, tmp_path: Path
) -> None:
    """Both versions, from a new session, with no request refused. The newest offers tools
    with ``defer_loading`` (tool search): behind an ``openai`` deployment the gateway drops
    the field and sends those tools as any other."""
    deferred = _deferred(claude_direct.posted)
    if claude_direct.package == CLAUDE_CODES[1]:
        assert deferred, "the newest Claude Code no longer sends defer_loading"
    mark = marked()
    with gateway(kind, claude_direct.model, mark, tmp_path) as through:
        run = run_claude(through.server.base_url, tmp_path / "home", claude_direct.package)
        assert mark.printed in run.stdout, through.explain(run)
        assert len(through.turns()) >= 2  # the call and the answer came from the upstream
        assert_no_400(through, run)
        if kind == "openai":
            sent = through.turns()
            offered = {t["function"]["name"] for body in sent for t in body.get("tools") or []}
            assert deferred <= offered
            assert _deferred(sent) == set()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_codex_completes_a_tool_loop_through_the_gateway(
    kind: str, codex_direct: Direct, tmp_path: Path
) -> None:
    mark = marked()
    with gateway(kind, codex_direct.model, mark, tmp_path) as through:
        run = run_codex(through.server.api, tmp_path / "home")
        assert mark.printed in run.stdout, through.explain(run)
        assert len(through.turns()) >= 2


def test_codex_with_its_openai_provider_completes_a_tool_loop_over_websocket(
    codex_direct: Direct, tmp_path: Path
) -> None:
    """The built-in provider at the gateway's URL opens Responses over WebSocket first; it
    falls back to HTTP POSTs only when the upgrade fails, so none may reach the gateway."""
    mark = marked()
    with gateway("openai", codex_direct.model, mark, tmp_path) as through:
        run = run_codex(through.server.api, tmp_path / "home", provider="openai")
        assert mark.printed in run.stdout, through.explain(run)
        posts = [
            line
            for line in through.server.log().splitlines()
            if '"method": "POST", "path": "/v1/responses"' in line
        ]
        assert posts == [], through.explain(run)


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_gemini_cli_completes_a_tool_loop_through_the_gateway(kind: str, tmp_path: Path) -> None:
    """Gemini CLI speaks only Google's API, so it runs through the gateway alone: its
    ``streamGenerateContent`` calls translated for a chat or a Messages upstream, or passed
    through to a Gemini one, whose signed function call must come back signed. Its shell
    tool refuses ``$(...)``, so the command prints a number its text holds apart."""
    if not agents_bin("gemini").exists():
        pytest.fail("Gemini CLI is not installed: run scripts/test-agents.sh")
    number = random.randrange(10**6, 10**7)
    mark = Marked(Script(f"printf 'shunter-%s-marker' {number}"), f"shunter-{number}-marker")
    with gateway(kind, "gemini-agent", mark, tmp_path) as through:
        run = run_gemini(through.server.base_url, tmp_path / "home", "gemini-agent")
        assert mark.printed in run.stdout, through.explain(run)
        assert len(through.turns()) >= 2
        posts = [
            line
            for line in through.server.log().splitlines()
            if '"path": "/v1beta/models/gemini-agent:streamGenerateContent"' in line
        ]
        assert len(posts) >= 2, through.explain(run)
        if kind == "gemini":
            called = [
                part
                for body in through.turns()
                for content in body["contents"]
                for part in content["parts"]
                if content.get("role") == "model" and "functionCall" in part
            ]
            assert called, through.explain(run)
            assert called[0]["functionCall"]["id"] == CALL_ID
            assert called[0]["thoughtSignature"] == SIGNATURE  # as Gemini signed it
            keys = {r.headers.get("x-goog-api-key") for r in through.upstream.requests}
            assert keys == {"sk-upstream"}  # the deployment's key, never the CLI's
