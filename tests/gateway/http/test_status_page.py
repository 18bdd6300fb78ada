"""The status page (``/ui``) of a real ``shunter serve`` with API keys (in a real
redis-server), a remote deployment (a real upstream on loopback) and a local one (a real
llama.cpp engine on a tiny GGUF): only the master key opens it, and a real headless
Chromium signs in, sees the deployments, and sees a request appear without reloading.
Without keys the page is open (to whom the open-mode guard lets in), and escapes what
clients sent.

The browser's screenshots are kept: the whole page as ``status.png`` and the charts of the
last hour as ``status-charts.png``, in the test's pytest folder, or where
``SHUNTER_UI_SCREENSHOT=path.png`` says (the documentation's picture), with the charts beside
it as ``path-charts.png``."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.admission.keys import KeyRing
from gateway.http.uicharts import BOTTOM, HEIGHT
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.gateway.http.chromium import Page, chromium
from tests.redis_server import RedisServer, start_redis

MASTER = "sk-master-status-page"
HELLO = [{"role": "user", "content": "hi"}]
FLOOR = HEIGHT - BOTTOM  # a chart's zero line, in its SVG's units


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as fake:
        yield fake


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def team_key(redis: RedisServer) -> str:
    async def create() -> str:
        store = RedisStateStore.from_url(redis.url, prefix="shunter")
        try:
            secret, _ = await KeyRing(store).create("team-a", rpm=600, tpm=200_000, budget_usd=5.0)
            return secret
        finally:
            await store.aclose()

    return asyncio.run(create())


@pytest.fixture(scope="module")
def server(
    upstream: FaultUpstream,
    redis: RedisServer,
    team_key: str,
    tiny_model: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("ui")
    config = tmp / "shunter.yaml"
    config.write_text(
        f"""
deployments:
  - name: remote
    backend: openai
    base_url: "{upstream.url}"
    model: gpt-fake
    price: {{input_per_1m: 0.15, output_per_1m: 0.6}}
  - name: local
    backend: llamacpp
    model: {tiny_model}
    n_ctx: 2048
    threads: 1
    parallel: 2
models:
  chat: {{candidates: [remote, local], policy: [healthy, capable, cheapest]}}
  tiny: {{candidates: [local]}}
"""
    )
    env = {"SHUNTER_REDIS_URL": redis.url, "SHUNTER_MASTER_KEY": MASTER}
    srv = start_server(config, tmp / "server.log", env=env)
    yield srv
    stop_server(srv)


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_only_the_master_key_opens_the_page(server: Server, team_key: str) -> None:
    base = server.base_url
    page = httpx.get(f"{base}/ui")
    assert page.status_code == 401 and 'name="key"' in page.text
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert httpx.get(f"{base}/ui/status.json").status_code == 401
    assert httpx.get(f"{base}/ui/status.json", headers=_bearer(team_key)).status_code == 401
    data = httpx.get(f"{base}/ui/status.json", headers=_bearer(MASTER)).json()
    assert [d["name"] for d in data["deployments"]] == ["local", "remote"]
    (key,) = data["keys"]
    assert (key["name"], key["rpm"], key["budget_usd"]) == ("team-a", 600, 5.0)
    assert key["rpm_remaining"] is not None and key["spent_usd"] == 0
    assert [p["deployment"] for p in data["memory"]] == ["local"]
    assert team_key not in httpx.get(f"{base}/ui", headers=_bearer(MASTER)).text


def test_signing_in_sets_a_safe_session_cookie(server: Server) -> None:
    base = server.base_url
    with httpx.Client(base_url=base) as client:
        wrong = client.post("/ui/login", data={"key": "sk-wrong"})
        assert wrong.status_code == 401 and "not the master key" in wrong.text
        foreign = client.post(
            "/ui/login", data={"key": MASTER}, headers={"origin": "https://evil.example"}
        )
        assert foreign.status_code == 403
        signed = client.post("/ui/login", data={"key": MASTER})
        assert signed.status_code == 303 and signed.headers["location"] == "/ui"
        cookie = signed.headers["set-cookie"]
        for attribute in ("HttpOnly", "SameSite=Strict", "Path=/ui", "Max-Age=43200"):
            assert attribute.lower() in cookie.lower(), cookie
        assert MASTER not in cookie
        assert client.get("/ui/panel").status_code == 200
        value = client.cookies["shunter_ui"]
        expires, _, mac = value.partition(".")
        client.cookies.set("shunter_ui", f"{int(expires) + 3600}.{mac}", path="/ui")
        assert client.get("/ui/panel").status_code == 401  # a forged expiry fails its HMAC
        client.cookies.set("shunter_ui", value, path="/ui")
        assert client.post("/ui/logout").status_code == 303
        assert "Max-Age=0" in client.post("/ui/logout").headers["set-cookie"]


async def test_a_browser_signs_in_and_watches_requests_arrive(
    server: Server, team_key: str, tmp_path: Path
) -> None:
    async with chromium(tmp_path / "profile") as page, httpx.AsyncClient() as client:
        await page.navigate(f"{server.base_url}/ui")
        assert await page.evaluate("!!document.querySelector('form#login')")
        await page.evaluate(
            f"document.getElementById('key').value = {MASTER!r};"
            "document.getElementById('login').submit(); true"
        )
        await page.wait_event("Page.loadEventFired")
        rows = await page.wait_for(
            "[...document.querySelectorAll('#deployments tr[data-deployment]')]"
            ".map(r => r.dataset.deployment).join(',')"
        )
        assert rows == "local,remote"
        remote_row = "document.querySelector('#deployments tr[data-deployment=\"remote\"]')"
        assert await page.evaluate(f"{remote_row}.querySelector('.badge').textContent") == "healthy"
        assert await page.evaluate(f"{remote_row}.querySelector('.ttft').textContent") == "\u2013"
        assert await page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it

        api = f"{server.api}/chat/completions"
        for model, request_id in (("chat", "req-ui-remote"), ("tiny", "req-ui-local")):
            body = {"model": model, "messages": HELLO, "max_tokens": 8}
            headers = {**_bearer(team_key), "x-request-id": request_id}
            answer = await client.post(api, json=body, headers=headers, timeout=60)
            assert answer.status_code == 200, answer.text
        missing = {"model": "no-such-model", "messages": HELLO}
        assert (await client.post(api, json=missing, headers=_bearer(team_key))).status_code == 404

        # no reload: the page's own script brings the new rows in
        row = "document.querySelector('#decisions tr[data-request-id=\"req-ui-local\"]')"
        text = await page.wait_for(f"{row} && {row}.innerText")
        assert "local" in text and "200" in text
        remote = await page.evaluate(
            "document.querySelector('#decisions tr[data-request-id=\"req-ui-remote\"]').innerText"
        )
        assert "remote" in remote and "cheapest" in remote
        # the live figures moved too: the remote deployment has a measured TTFT now
        ttft = await page.wait_for(
            f"{remote_row}.querySelector('.ttft').textContent.replace('\u2013', '')"
        )
        assert float(ttft.replace(",", "")) > 0
        assert await page.wait_for("document.querySelector('#keys tr[data-key]') !== null")
        await page.wait_for("document.getElementById('refresh-state').textContent === 'live'")
        box = await _the_last_hour_is_charted(page)
        shot = Path(os.environ.get("SHUNTER_UI_SCREENSHOT") or tmp_path / "status.png")
        await page.screenshot(shot)
        assert shot.stat().st_size > 10_000
        charts = shot.with_name(f"{shot.stem}-charts.png")  # kept beside the page's
        await page.screenshot(charts, clip=box)
        assert charts.stat().st_size > 5_000


async def _the_last_hour_is_charted(page: Page) -> dict[str, float]:
    """The charts drew this minute's requests, tokens, latency and spend, in the page's own
    markup (nothing loaded from another origin); the box they fill on the page."""
    assert await page.evaluate("document.querySelectorAll('#history figure.chart svg').length") == 8
    for chart, series in (
        ("requests", "requests"), ("tokens", "output"), ("latency", "p95"),
        ("spend-model", "chat"), ("spend-key", "team-a"),
    ):  # fmt: skip
        line = f"document.querySelector('#chart-{chart} polyline[data-series=\"{series}\"]')"
        # a line that rose above the chart's floor this minute (y grows downwards)
        rose = (
            f"{line} && (ys => Math.min(...ys) < {FLOOR})({line}.getAttribute('points').trim()"
            ".split(' ').map(p => Number(p.split(',')[1])))"
        )
        assert await page.wait_for(rose), (chart, series)
    drawn = "document.querySelector('#chart-requests svg').getBoundingClientRect().height"
    assert await page.evaluate(drawn) > 60
    assert await page.evaluate(
        "performance.getEntriesByType('resource').every(e => e.name.startsWith(location.origin))"
    )
    box: dict[str, float] = await page.evaluate(
        "(r => ({x: r.x, y: r.y + window.scrollY, width: r.width, height: r.height}))"
        "(document.getElementById('history').getBoundingClientRect())"
    )
    return box


@pytest.fixture(scope="module")
def open_server(
    upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("ui-open")
    config = tmp / "shunter.yaml"
    config.write_text(
        f"""
deployments:
  - {{name: remote, backend: openai, base_url: "{upstream.url}", model: gpt-fake}}
models:
  chat: {{candidates: [remote]}}
"""
    )
    srv = start_server(config, tmp / "server.log")
    yield srv
    stop_server(srv)


def test_open_mode_shows_the_page_and_escapes_what_clients_sent(open_server: Server) -> None:
    base = open_server.base_url
    hostile = "<img src=x onerror=alert(1)>"
    missing = httpx.post(
        f"{open_server.api}/chat/completions", json={"model": hostile, "messages": HELLO}
    )
    assert missing.status_code == 404
    page = httpx.get(f"{base}/ui")
    assert page.status_code == 200
    assert 'data-deployment="remote"' in page.text
    assert "/ui/assets/ui.js" in page.text and "://" not in page.text.split("<body")[0]
    # the request joins the ring once its last byte is sent: maybe a moment after we read it
    deadline = time.monotonic() + 10
    panel = httpx.get(f"{base}/ui/panel").text
    while "no-decisions" in panel and time.monotonic() < deadline:
        time.sleep(0.05)
        panel = httpx.get(f"{base}/ui/panel").text
    assert hostile not in panel and "&lt;img src=x onerror=alert(1)&gt;" in panel
    data = httpx.get(f"{base}/ui/status.json").json()
    assert "keys" in data and data["keys"] == []  # open mode: no keys to show
    assert (
        httpx.get(f"{base}/ui/assets/ui.js").headers["content-type"].startswith("text/javascript")
    )
    assert httpx.get(f"{base}/ui/assets/page.html").status_code == 404  # the two assets only
