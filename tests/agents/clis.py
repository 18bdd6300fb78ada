"""Running the real agent CLIs, Claude Code, Codex and Gemini CLI, offline against a base URL.

The CLIs come from npm into ``.agents/node_modules`` (``scripts/test-agents.sh``;
``SHUNTER_AGENTS_DIR`` names another folder), Claude Code twice: the pinned version as
``@anthropic-ai/claude-code`` and the newest under the alias ``claude-code-new``. Each run
gets a fresh home, config folder and working folder under ``home``, an environment holding
only what it needs, and the settings that keep it off its vendor's network (no telemetry,
error reports, update checks or analytics), so the only host it reaches is the one it is given.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROMPT = "Run the shell command that prints the marker, then tell me what it printed."


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


CLAUDE_CODES = ("@anthropic-ai/claude-code", "claude-code-new")
"""Claude Code's npm folders: the pinned version, and the newest (an npm alias)."""


def agents_modules() -> Path:
    """The ``node_modules`` folder the CLIs and the Node packages are installed in."""
    folder = Path(os.environ.get("SHUNTER_AGENTS_DIR") or REPO / ".agents")
    return folder / "node_modules"


def agents_bin(name: str) -> Path:
    """Where the CLI ``name`` (``claude``, ``codex`` or ``gemini``) is installed."""
    return agents_modules() / ".bin" / name


def package_bin(package: str, name: str) -> Path:
    """The executable ``name`` of the npm package in the folder ``package``: two packages
    with the same executable (two Claude Codes) share one ``.bin`` link, so each is run
    from its own folder."""
    folder = agents_modules() / package
    declared = json.loads((folder / "package.json").read_text())["bin"]
    return folder / (declared if isinstance(declared, str) else declared[name])


def package_version(package: str) -> str:
    """The version of the npm package installed in the folder ``package``, or ``""``."""
    try:
        manifest = json.loads((agents_modules() / package / "package.json").read_text())
    except FileNotFoundError:
        return ""
    return str(manifest["version"])


def _run(command: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> Run:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "dumb", "LANG": "C.UTF-8"}
    try:
        done = subprocess.run(
            command,
            env={**base, **env},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as stopped:  # a CLI retrying for ever: show what it said
        said = [(out or b"").decode(errors="replace") for out in (stopped.stdout, stopped.stderr)]
        return Run(-1, said[0], f"(killed after {timeout_s:.0f} s)\n{said[1]}")
    return Run(
        done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    )


def _fresh(home: Path) -> Path:
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    return work


def run_claude(
    base_url: str, home: Path, package: str = CLAUDE_CODES[0], timeout_s: float = 60
) -> Run:
    """``claude -p`` (Claude Code from the npm folder ``package``) with its default model,
    allowed to run Bash, against ``base_url``."""
    env = {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-agent-test",
        # one switch for the auto-updater, telemetry, error reports and feedback
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    command = [str(package_bin(package, "claude")), "-p", PROMPT, "--allowedTools", "Bash"]
    return _run(command, env, _fresh(home), timeout_s)


OFFLINE_CODEX = (
    "check_for_update_on_startup = false\n"
    "[analytics]\nenabled = false\n"
    # plugin and app catalogues are fetched from github.com and chatgpt.com; off, the
    # request carries the same tools and nothing is looked up beyond loopback
    "[features]\nplugins = false\nremote_plugin = false\napps = false\n"
)


def codex_config(base_url: str, provider: str) -> str:
    """A ``config.toml`` pointing Codex at ``base_url`` (with ``/v1``).

    ``provider`` ``custom``: a provider of its own (HTTP only, its key from
    ``GATEWAY_API_KEY``); ``openai``: the built-in one moved by ``openai_base_url``, which
    tries Responses over WebSocket first and takes its key from ``codex login``.
    """
    if provider == "openai":
        return f'openai_base_url = "{base_url}"\n' + OFFLINE_CODEX
    return (
        'model_provider = "gateway"\n' + OFFLINE_CODEX + "[model_providers.gateway]\n"
        'name = "gateway"\n'
        f'base_url = "{base_url}"\n'
        'env_key = "GATEWAY_API_KEY"\n'
        'wire_api = "responses"\n'
    )


def run_codex(base_url: str, home: Path, provider: str = "custom", timeout_s: float = 60) -> Run:
    """``codex exec`` with its default model, free to run commands, against ``base_url``."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(base_url, provider))
    env = {"HOME": str(home), "CODEX_HOME": str(codex_home), "GATEWAY_API_KEY": "sk-agent-test"}
    codex = str(agents_bin("codex"))
    if provider == "openai":
        login = [codex, "login", "--with-api-key"]
        subprocess.run(login, env={**os.environ, **env}, input=b"sk-agent-test", check=True,
                       capture_output=True, timeout=timeout_s)  # fmt: skip
    flags = ["--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    return _run([codex, "exec", *flags, PROMPT], env, _fresh(home), timeout_s)


GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}
"""Gemini CLI's settings: its API-key login, and nothing sent but the model's requests."""


def run_gemini(base_url: str, home: Path, model: str, timeout_s: float = 90) -> Run:
    """``gemini -p`` on ``model``, free to run its shell tool, against ``base_url``."""
    settings = home / ".gemini"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "settings.json").write_text(json.dumps(GEMINI_SETTINGS))
    env = {
        "HOME": str(home),
        "GEMINI_API_KEY": "sk-agent-test",
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",  # its work folder is a fresh one
    }
    command = [str(agents_bin("gemini")), "-p", PROMPT, "--model", model, "--yolo"]
    return _run(command, env, _fresh(home), timeout_s)
