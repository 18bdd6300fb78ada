"""SSE framing of upstream streams (backends/http.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from backends.http.plumbing import iter_frame_batches


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_frames_that_arrive_together_come_out_together() -> None:
    reads = (b"data: 1\n\ndata: 2\n\ndata: 3\n\nda", b"ta: 4\r\n\r", b"\n: note\n\ndata: 5")
    batches = [b async for b in iter_frame_batches(b"", chunks_of(*reads), "up", None)]
    assert batches == [[b"data: 1", b"data: 2", b"data: 3"], [b"data: 4", b": note"], [b"data: 5"]]
