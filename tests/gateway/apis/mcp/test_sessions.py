"""``Mcp-Session-Id`` values: signed, bound to a key, shared through the state store,
ended on every replica."""

from __future__ import annotations

import time

from gateway.apis.mcp.sessions import SESSION_TTL_S, McpSessions
from gateway.state.memory import MemoryStateStore


async def test_a_session_serves_its_key_on_another_replica_until_ended() -> None:
    store = MemoryStateStore()
    one, two = McpSessions(store), McpSessions(store)  # two replicas, one store
    session = await one.issue("key_a")
    assert await two.check(session, "key_a")
    assert not await two.check(session, "key_b")  # another key cannot use it
    assert await two.end(session, "key_a")
    assert not await one.check(session, "key_a")


async def test_forged_expired_and_malformed_ids_are_refused() -> None:
    sessions = McpSessions(MemoryStateStore(), secret=b"k" * 32)
    session = await sessions.issue("key_a")
    forged = session[:-1] + ("0" if session[-1] != "0" else "1")
    assert not await sessions.check(forged, "key_a")
    old = await sessions.issue("key_a", now=time.time() - SESSION_TTL_S - 1)
    assert not await sessions.check(old, "key_a")
    for bad in ("", "s1", "s1.x.y.z.w", "é" * 10, "s1." + "9" * 300):
        assert not await sessions.check(bad, "key_a")
    other = McpSessions(MemoryStateStore(), secret=b"j" * 32)
    assert not await other.check(session, "key_a")  # another gateway's secret
