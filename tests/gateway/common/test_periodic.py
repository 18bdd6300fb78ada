"""The background loop behind config reload, replica sync, probes and sweeps."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.common.periodic import Periodic


async def stops_within(ticker: Periodic, seconds: float) -> bool:
    stopping = asyncio.ensure_future(ticker.stop())
    done, _ = await asyncio.wait([stopping], timeout=seconds)
    return stopping in done


async def test_runs_its_step_every_interval_until_stopped() -> None:
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1

    ticker = Periodic(0.01, step)
    ticker.start()
    await asyncio.sleep(0.2)
    await ticker.stop()
    seen = calls
    await asyncio.sleep(0.05)
    assert seen >= 3
    assert calls == seen


async def test_stop_ends_a_loop_whose_step_swallows_the_cancellation() -> None:
    # a client library whose own timeout fires as the cancellation lands reports its
    # timeout instead; the step takes that for an outage and returns normally
    entered = asyncio.Event()
    steps = 0

    async def step() -> None:
        nonlocal steps
        steps += 1
        entered.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)

    ticker = Periodic(0.01, step)
    ticker.start()
    await entered.wait()
    assert await stops_within(ticker, 5)
    assert steps == 1


async def test_stop_ends_a_loop_that_swallows_every_cancellation() -> None:
    async def step() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                return

    ticker = Periodic(0.0, step)
    ticker.start()
    await asyncio.sleep(0.02)
    assert await stops_within(ticker, 5)


async def test_a_failed_step_surfaces_at_stop() -> None:
    async def step() -> None:
        raise RuntimeError("broken step")

    ticker = Periodic(0.0, step)
    ticker.start()
    await asyncio.sleep(0.02)
    with pytest.raises(RuntimeError, match="broken step"):
        await ticker.stop()


async def test_stop_before_start_and_twice_is_harmless() -> None:
    async def step() -> None:
        pass

    ticker = Periodic(1.0, step)
    await ticker.stop()
    ticker.start()
    await ticker.stop()
    await ticker.stop()
