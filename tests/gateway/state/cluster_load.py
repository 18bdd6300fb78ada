"""The load of the Redis Cluster failover test: clients of several keys, each in a loop of
a chat completion, a stored response and a turn of its conversation, spread over gateway
replicas; every answer is kept with when it was sent, so that the errors can be placed
against the failover."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

TAG = re.compile(r"\[k(\d+) s(\d+)\]")


@dataclass
class Outcome:
    """One request: what it was, when it went and came back, what it got."""

    kind: str
    user: int
    sent: float
    took: float
    status: int
    code: str = ""


@dataclass
class User:
    """One key's client: its secret, session, conversation and what it was answered."""

    index: int
    secret: str
    fail_open: bool
    conversation: str = ""
    turns: int = 0
    stored: dict[str, str] = field(default_factory=dict)


@dataclass
class Load:
    """Users in a loop over ``gateways`` (base URLs) until ``stop`` is set."""

    gateways: list[str]
    users: list[User]
    outcomes: list[Outcome] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            for user in self.users:
                user.conversation = await self._conversation(client, user)
            await asyncio.gather(*(self._loop(client, user) for user in self.users))

    async def _loop(self, client: httpx.AsyncClient, user: User) -> None:
        step = 0
        while not self.stop.is_set():
            base = self.gateways[(user.index + step) % len(self.gateways)]
            step += 1
            await self._chat(client, base, user)
            await self._stored(client, base, user)
            await self._turn(client, base, user)

    async def _conversation(self, client: httpx.AsyncClient, user: User) -> str:
        reply = await client.post(
            f"{self.gateways[0]}/v1/conversations",
            json={"metadata": {"user": str(user.index)}},
            headers=_auth(user),
        )
        reply.raise_for_status()
        conversation: str = reply.json()["id"]
        return conversation

    async def _chat(self, client: httpx.AsyncClient, base: str, user: User) -> None:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": f"{_tag(user)} hello"}],
            "max_tokens": 16,
        }
        await self._send(client, "chat", user, f"{base}/v1/chat/completions", body)

    async def _stored(self, client: httpx.AsyncClient, base: str, user: User) -> None:
        body = {"model": "m", "input": f"{_tag(user)} keep this", "max_output_tokens": 16}
        reply = await self._send(client, "stored", user, f"{base}/v1/responses", body)
        if reply is not None and reply.get("store") is True:
            user.stored[reply["id"]] = _text(reply)

    async def _turn(self, client: httpx.AsyncClient, base: str, user: User) -> None:
        body = {
            "model": "m",
            "input": f"{_tag(user)} turn {user.turns}",
            "conversation": user.conversation,
            "store": False,
            "max_output_tokens": 16,
        }
        if await self._send(client, "turn", user, f"{base}/v1/responses", body) is not None:
            user.turns += 1

    async def _send(
        self, client: httpx.AsyncClient, kind: str, user: User, url: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        """POST ``body``; the answer when it is a 200, after keeping its outcome."""
        sent = time.monotonic()
        try:
            reply = await client.post(url, json=body, headers=_auth(user))
        except httpx.TransportError as exc:
            self.outcomes.append(Outcome(kind, user.index, sent, time.monotonic() - sent, 0))
            self.outcomes[-1].code = type(exc).__name__
            return None
        outcome = Outcome(kind, user.index, sent, time.monotonic() - sent, reply.status_code)
        self.outcomes.append(outcome)
        if reply.status_code != 200:
            outcome.code = str(reply.json().get("error", {}).get("code"))
            await asyncio.sleep(0.05)  # as a client would before trying again
            return None
        answer: dict[str, Any] = reply.json()
        return answer


def _auth(user: User) -> dict[str, str]:
    return {"authorization": f"Bearer {user.secret}", "x-shunter-session": f"s{user.index}"}


def _tag(user: User) -> str:
    return f"[k{user.index} s{user.index}]"


def _text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response.get("output", [])
        for part in item.get("content", []) or []
    )


def served_by_user(bodies: list[dict[str, Any]]) -> Counter[int]:
    """How many upstream calls each user's requests made (its tag is in every prompt)."""
    counts: Counter[int] = Counter()
    for body in bodies:
        found = TAG.search(json.dumps(body))
        if found is not None:
            counts[int(found.group(1))] += 1
    return counts


def errors_by_phase(
    outcomes: list[Outcome], killed: float, promoted: float, settle_s: float
) -> dict[str, Counter[str]]:
    """Non-200 answers per phase: before the kill, until a replica is promoted, the
    ``settle_s`` after, and later; each counted by kind, status and error code."""
    phases: dict[str, Counter[str]] = {
        "before": Counter(),
        "failover": Counter(),
        "settling": Counter(),
        "after": Counter(),
    }
    for outcome in outcomes:
        ended = outcome.sent + outcome.took
        if ended < killed:
            phase = "before"
        elif outcome.sent <= promoted:
            phase = "failover"
        elif outcome.sent <= promoted + settle_s:
            phase = "settling"
        else:
            phase = "after"
        if outcome.status != 200:
            phases[phase][f"{outcome.kind} {outcome.status} {outcome.code}"] += 1
    return phases
