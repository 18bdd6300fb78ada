"""A real ``shunter serve`` whose models are ``gemini`` deployments in front of a recording
Gemini upstream (one per failure the upstream can play) and an ``openai`` one in front of a
scripted chat upstream, and what the native tests read of it: answers, events, the access
line and the metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Server, start_server
from tests.fixtures.gemini_upstream import GeminiUpstream
from tests.fixtures.scripted_upstream import ScriptedUpstream
from tests.waiting import eventually

MASTER = "sk-master-gemini-native"
KEY = "AIzaSyNativeKey000000000000000000000000"
UPSTREAM_MODEL = "gemini-3-pro-preview"
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "OBJECT",
        "properties": {"city": {"type": "STRING"}},
        "required": ["city"],
    },
}
TOOLS = [{"functionDeclarations": [WEATHER]}]
ASK = {"role": "user", "parts": [{"text": "Weather in Paris?"}]}
FAILING = {
    "limited": "rate-limited",
    "long": "too-long",
    "long-sse": "too-long",
    "cut": "midstream-error",
    "down": "unavailable",
    "refused": "bad-key",
    "unknown": "bad-field",
}
"""Deployments (each a model of its own, without fallback) and the failure each plays."""


def serve(gemini_up: GeminiUpstream, chat_up: ScriptedUpstream, folder: Path) -> Server:
    """The gateway: ``gem`` (``UPSTREAM_MODEL``, priced), each of :data:`FAILING`, and
    ``mixed`` and ``cut-mixed``, whose ``down`` or ``cut`` Gemini deployment falls back to
    the ``chat`` one."""
    wire = f"backend: gemini, base_url: '{gemini_up.url}', api_key_env: GEM_KEY"
    price = "price: {input_per_1m: 2, output_per_1m: 12}"
    lines = [
        # no breaker opens: each fallback tries the gemini deployment first
        "reliability: {retries: 0, failure_threshold: 1000}",
        "deployments:",
        f"  - {{name: gem, {wire}, model: {UPSTREAM_MODEL}, {price}}}",
        *(f"  - {{name: {name}, {wire}, model: {plays}}}" for name, plays in FAILING.items()),
        f"  - {{name: chat, backend: openai, base_url: '{chat_up.url}', model: scripted}}",
        "models:",
        "  gem: {candidates: [gem]}",
        "  mixed: {candidates: [down, chat], policy: [first]}",
        "  cut-mixed: {candidates: [cut, chat], policy: [first]}",
        *(f"  {name}: {{candidates: [{name}], fallback: false}}" for name in FAILING),
    ]
    (folder / "config.yaml").write_text("\n".join(lines) + "\n")
    env = {"SHUNTER_MASTER_KEY": MASTER, "GEM_KEY": KEY}
    return start_server(folder / "config.yaml", folder / "server.log", env=env)


def post(
    server: Server, model: str, action: str, body: bytes, request_id: str = "", **params: str
) -> httpx.Response:
    """``body`` as sent to ``model``'s ``action``, with the gateway's key."""
    headers = {"x-goog-api-key": MASTER, "content-type": "application/json"}
    if request_id:
        headers["x-request-id"] = request_id
    url = f"{server.base_url}/v1beta/models/{model}:{action}"
    return httpx.post(url, content=body, headers=headers, params=params, timeout=60)


def events(text: str) -> list[dict[str, Any]]:
    """The JSON of each ``data:`` line of a server-sent event stream."""
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def metric(server: Server, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    total = 0.0
    for found in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.MULTILINE):
        if all(f'{k}="{v}"' in found.group(1) for k, v in labels.items()):
            total += float(found.group(2))
    return total


def access_line(server: Server, request_id: str) -> dict[str, Any]:
    """The access line of ``request_id`` (written once the answer went out: waited for)."""

    def lines() -> list[dict[str, Any]]:
        return [
            json.loads(line)
            for line in server.log().splitlines()
            if line.startswith("{") and request_id in line and '"event": "request"' in line
        ]

    assert eventually(lambda: bool(lines())), f"no access line for {request_id}"
    return lines()[-1]
