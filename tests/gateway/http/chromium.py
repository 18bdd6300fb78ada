"""A real headless Chromium (Debian's ``chromium`` package), driven over the DevTools
protocol with the ``websockets`` package: open a page, run script in it, wait for what it
shows, take a screenshot. Nothing is downloaded; without a browser the test is skipped,
saying how to install one (``scripts/test.sh`` installs it)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

INSTALL_HINT = (
    "chromium is not installed; the status page's browser test needs a real one. Install "
    "it with `apt-get install -y chromium` (Debian/Ubuntu; scripts/test.sh does) and run "
    "the tests again."
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--window-size=1500,1100",
)


class Page:
    """One browser tab over a flat DevTools session."""

    def __init__(self, socket: ClientConnection, session: str) -> None:
        self._socket, self._session = socket, session
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for raw in self._socket:
            message = json.loads(raw)
            waiter = self._pending.pop(message.get("id", -1), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(message)
            elif "method" in message:
                self.events.append(message)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        waiter = asyncio.get_running_loop().create_future()
        self._pending[number] = waiter
        message = {"id": number, "method": method, "params": params}
        if self._session:
            message["sessionId"] = self._session
        await self._socket.send(json.dumps(message))
        answer = await asyncio.wait_for(waiter, 30)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    async def navigate(self, url: str) -> None:
        self.events.clear()
        await self.call("Page.navigate", url=url)
        await self.wait_event("Page.loadEventFired")

    async def wait_event(self, method: str, timeout_s: float = 15) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for event in self.events:
                if event["method"] == method:
                    self.events.remove(event)
                    return event
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {method} within {timeout_s}s")

    async def evaluate(self, expression: str) -> Any:
        result = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 15) -> Any:
        """The value of ``expression`` once it is truthy."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.1)
        raise AssertionError(f"never true within {timeout_s}s: {expression}")

    async def screenshot(self, path: Path, clip: dict[str, float] | None = None) -> None:
        """The whole page as a PNG at ``path``, or only ``clip`` (x, y, width, height)."""
        extra: dict[str, Any] = {"clip": {**clip, "scale": 1}} if clip else {}
        shot = await self.call(
            "Page.captureScreenshot", format="png", captureBeyondViewport=True, **extra
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[Page]:
    """A headless Chromium with a fresh profile, and one tab in it."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip(INSTALL_HINT)
    process = subprocess.Popen(
        [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        socket = await connect(await _browser_url(profile, process), max_size=None)
        try:
            browser = Page(socket, "")
            target = await browser.call("Target.createTarget", url="about:blank")
            attached = await browser.call(
                "Target.attachToTarget", targetId=target["targetId"], flatten=True
            )
            await browser.close()
            page = Page(socket, attached["sessionId"])
            await page.call("Page.enable")
            await page.call("Runtime.enable")
            yield page
            await page.close()
        finally:
            await socket.close()
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _browser_url(profile: Path, process: subprocess.Popen[bytes]) -> str:
    """The browser's DevTools address, from the file Chromium writes once it listens."""
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chromium exited with {process.returncode}")
        if active.exists():
            lines = active.read_text().split()
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
        await asyncio.sleep(0.05)
    raise RuntimeError("chromium did not open its DevTools port")
