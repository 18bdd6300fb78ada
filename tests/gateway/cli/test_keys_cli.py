"""``shunter keys create|list|revoke`` against a real redis-server."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.admission.keys import KeyRing
from gateway.cli import main
from gateway.cli.keys import parse_duration, safe_url
from gateway.errors import PermissionDeniedError
from gateway.state.redis import RedisStateStore
from tests.conftest import free_port
from tests.redis_server import RedisServer


def test_durations() -> None:
    assert [parse_duration(t) for t in ("90s", "15m", "12h", "30d", "1w", "1.5h")] == [
        90,
        900,
        43200,
        2592000,
        604800,
        5400,
    ]
    for bad in ("30", "d", "-1d", "0s"):
        with pytest.raises(Exception, match=r"duration|second"):
            parse_duration(bad)


def test_passwords_are_masked_in_messages() -> None:
    assert safe_url("redis://:hunter2@cache:6379/0") == "redis://:***@cache:6379/0"
    assert safe_url("redis://app:hunter2@cache/0") == "redis://app:***@cache/0"
    assert safe_url("redis://cache:6379") == "redis://cache:6379"


async def test_create_list_revoke(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHUNTER_REDIS_URL", redis_server.url)
    args = ["keys", "create", "--name", "ci", "--rpm", "5", "--tpm", "9000", "--models", "a,b"]
    args += ["--budget", "2.5", "--budget-window", "1d", "--expires", "30d"]
    assert await _main(args) == 0
    out, err = capsys.readouterr()
    secret = out.strip()
    assert secret.startswith("sk-shunter-") and secret not in err
    assert "shown only now" in err

    assert await _main(["keys", "list"]) == 0
    listed = capsys.readouterr().out
    assert "ci" in listed and "active" in listed and "rpm=5" in listed
    assert "budget=$0.0000/2.50 per 86400s" in listed
    assert secret not in listed

    assert await _main(["keys", "list", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    row = next(r for r in rows if r["name"] == "ci")
    assert "secret_hash" not in row and row["models"] == ["a", "b"] and row["spent_usd"] == 0

    store = RedisStateStore.from_url(redis_server.url)
    ring = KeyRing(store)
    info = await ring.authenticate(f"Bearer {secret}", "a")
    assert (info.rpm, info.tpm, info.budget_usd, info.budget_window_s) == (5, 9000, 2.5, 86400)

    assert await _main(["keys", "revoke", row["id"]]) == 0
    assert f"revoked {row['id']}" in capsys.readouterr().out
    with pytest.raises(PermissionDeniedError):
        await KeyRing(store).authenticate(f"Bearer {secret}", "a")
    await store.aclose()
    assert await _main(["keys", "revoke", "key_nope"]) == 1
    assert "no key with id" in capsys.readouterr().err


async def test_session_limits_of_a_key(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHUNTER_REDIS_URL", redis_server.url)
    args = ["keys", "create", "--name", "session-cli", "--session-budget-usd", "5"]
    args += ["--session-max-tokens", "200000", "--session-loop-repeats", "8"]
    assert await _main(args) == 0
    secret = capsys.readouterr().out.strip()
    assert await _main(["keys", "list"]) == 0
    listed = next(line for line in capsys.readouterr().out.splitlines() if "session-cli" in line)
    assert "session_budget=$5.00" in listed and "session_loop_repeats=8" in listed
    store = RedisStateStore.from_url(redis_server.url)
    info = await KeyRing(store).authenticate(f"Bearer {secret}", "a")
    await store.aclose()
    assert info.session is not None
    assert (info.session.budget_usd, info.session.max_tokens) == (5.0, 200000)
    assert (info.session.rpm, info.session.loop_repeats) == (None, 8)
    for bad in (["--session-loop-repeats", "1"], ["--session-budget-usd", "0"]):
        with pytest.raises(SystemExit):
            await _main(["keys", "create", "--name", "x", *bad])
    capsys.readouterr()


async def test_without_redis_the_command_refuses_and_says_why(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHUNTER_REDIS_URL", raising=False)
    assert await _main(["keys", "list"]) == 2
    err = capsys.readouterr().err
    assert "no Redis is configured" in err and "SHUNTER_REDIS_URL" in err


async def test_an_unreachable_redis_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    assert await _main(["keys", "list", "--redis-url", url]) == 1
    err = capsys.readouterr().err
    assert "cannot reach Redis" in err and "hunter2" not in err


async def _main(argv: list[str]) -> int:
    """Run the CLI in a worker thread: it starts its own event loop."""
    return await asyncio.to_thread(main, argv)


async def test_create_with_an_mcp_allow_list(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHUNTER_REDIS_URL", redis_server.url)
    args = ["keys", "create", "--name", "agents", "--mcp", "docs", "--mcp", "files:read_file"]
    assert await _main(args) == 0
    secret = capsys.readouterr().out.strip()
    store = RedisStateStore.from_url(redis_server.url, prefix="shunter")
    try:
        key = await KeyRing(store).identify(f"Bearer {secret}")
    finally:
        await store.aclose()
    assert key.mcp == ("docs", "files:read_file")
    assert await _main(["keys", "list"]) == 0
    assert "mcp=docs,files:read_file" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        await _main(["keys", "create", "--name", "bad", "--mcp", "files:"])
