"""A reservation reads what the upstream reported: a real `shunter serve` on a real
redis-server, in front of a loopback upstream that counts 50 times the prompt the gateway
can see (as a provider's own system prompt, a template or a document make it do).

Each answer is billed 50 x (the prompt's characters / 4) tokens at $1 per million: about
$0.005 for the prompt sent here, while the gateway estimates about $0.0001. A key with
$0.01 that has seen one such answer must not let 40 concurrent requests through on the
estimate: after the first settles, each reserves what the deployment reports; and a session
reserves at least the prompt its last answer reported, even once the deployment's ratio is
back near 1."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.loopback import LoopbackServer
from tests.redis_server import RedisServer

MASTER = "sk-master-reported-prompts"
INFLATION = 50
PDF = "[pdf]"  # a prompt holding it is counted at INFLATION times (a document attached)
PROMPT = PDF + " Summarise the attached report in one line." * 10  # 435 characters
CONCURRENT = 40


@dataclass
class InflatingUpstream(LoopbackServer):
    """An OpenAI-compatible chat upstream that reports the prompt tokens its text holds (4
    characters a token), ``INFLATION`` times that for a prompt holding :data:`PDF`, after
    ``delay_s``."""

    delay_s: float = 0.5
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    async def answer(
        self,
        request_line: str,
        headers: dict[str, str],
        body: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        request = json.loads(body) if body else {}
        self.bodies.append(request)
        text = "".join(str(m.get("content") or "") for m in request.get("messages", []))
        prompt = max(1, len(text) // 4) * (INFLATION if PDF in text else 1)
        await asyncio.sleep(self.delay_s)
        message = {"role": "assistant", "content": "Done."}
        answer = {
            "id": "chatcmpl-inflating",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "inflating",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2},
        }
        payload = json.dumps(answer).encode()
        head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        writer.write(f"{head}content-length: {len(payload)}\r\n\r\n".encode() + payload)
        await writer.drain()


@pytest.fixture(scope="module")
def gateway(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("reported-prompts")
    with InflatingUpstream() as upstream:
        (folder / "shunter.yaml").write_text(
            "deployments:\n"
            f"  - {{name: inflating, backend: openai, base_url: 'http://127.0.0.1:{upstream.port}/v1',"
            " model: inflating, price: {input_per_1m: 1, output_per_1m: 0}}\n"
            "models:\n  m: {candidates: [inflating]}\n"
        )
        env = {"SHUNTER_REDIS_URL": redis_server.url, "SHUNTER_MASTER_KEY": MASTER}
        server = start_server(folder / "shunter.yaml", folder / "server.log", env=env)
        try:
            yield server
        finally:
            stop_server(server)


def body(prompt: str = PROMPT) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 16}


def post(server: Server, key: str, prompt: str, session: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    if session is not None:
        headers["x-shunter-session"] = session
    url = f"{server.api}/chat/completions"
    return httpx.post(url, json=body(prompt), headers=headers, timeout=30)


def spent_usd(redis: RedisServer, name: str) -> float:
    command = [sys.executable, "-m", "gateway.cli", "keys", "list", "--json"]
    listing = subprocess.run(
        [*command, "--redis-url", redis.url], capture_output=True, text=True, check=True
    ).stdout
    rows = [json.loads(line) for line in listing.splitlines() if line.startswith("{")]
    spent: float = next(r for r in rows if r["name"] == name)["spent_usd"]
    return spent


async def all_at_once(server: Server, key: str, session: str | None = None) -> list[int]:
    headers = {"authorization": f"Bearer {key}"}
    if session is not None:
        headers["x-shunter-session"] = session
    url = f"{server.api}/chat/completions"
    limits = httpx.Limits(max_connections=CONCURRENT)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        answers = await asyncio.gather(
            *(client.post(url, json=body(), headers=headers) for _ in range(CONCURRENT))
        )
    return [a.status_code for a in answers]


def test_after_one_answer_the_reported_prompt_is_reserved(
    redis_server: RedisServer, gateway: Server
) -> None:
    key = redis_server.create_key("--name", "inflated", "--budget", "0.01")
    first = httpx.post(
        f"{gateway.api}/chat/completions",
        json=body(),
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert first.status_code == 200, first.text
    one = first.json()["usage"]["prompt_tokens"] / 1e6  # what one answer costs
    assert spent_usd(redis_server, "inflated") == pytest.approx(one)
    statuses = asyncio.run(all_at_once(gateway, key))
    served = statuses.count(200)
    spent = spent_usd(redis_server, "inflated")
    print(f"served {served} of {CONCURRENT}; spent ${spent:.4f} of $0.01 (one answer ${one:.4f})")
    assert set(statuses) <= {200, 429}
    # the budget had room for one more answer: at most one reservation past it
    assert served <= 1
    assert spent <= 0.01 + one + 1e-9


def test_a_session_reserves_at_least_its_last_reported_prompt(
    redis_server: RedisServer, gateway: Server
) -> None:
    key = redis_server.create_key("--name", "session", "--budget", "0.01")
    first = post(gateway, key, PROMPT, session="with-pdf")
    assert first.status_code == 200, first.text
    # then many prompts counted as estimated: the deployment's ratio comes back near 1
    plain = "Summarise the attached report in one line. " * 10
    for _ in range(30):
        assert post(gateway, key, plain).status_code == 200
    spent = spent_usd(redis_server, "session")
    one = first.json()["usage"]["prompt_tokens"] / 1e6
    assert 0.01 - spent < one  # less left than the session's prompt costs
    statuses = asyncio.run(all_at_once(gateway, key, session="with-pdf"))
    after = spent_usd(redis_server, "session")
    print(f"session: served {statuses.count(200)} of {CONCURRENT}; ${spent:.4f} -> ${after:.4f}")
    assert set(statuses) <= {200, 429}
    # the one the budget's room lets in, holding the session's prompt: no more
    assert statuses.count(200) <= 1
    assert after <= 0.01 + one + 1e-9
