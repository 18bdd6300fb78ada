"""SSE framing of upstream streams (backends/http.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from backends.http.sse import FrameBatches as FrameStream
from backends.http.sse import data_events, frames_of, iter_frame_blocks


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_frames_that_arrive_together_come_out_together() -> None:
    reads = (b"data: 1\n\ndata: 2\n\ndata: 3\n\nda", b"ta: 4\r\n\r", b"\n: note\n\ndata: 5")
    batches = [b async for b in FrameStream(b"", chunks_of(*reads), "up", None)]
    assert batches == [[b"data: 1", b"data: 2", b"data: 3"], [b"data: 4", b": note"], [b"data: 5"]]


async def test_a_read_becomes_one_block_cut_after_its_last_whole_event() -> None:
    reads = (b"data: 1\n\ndata: 2\n\nda", b"ta: 3\r\n\r", b"\n: note\n\ndata: 4")
    blocks = [b async for b in iter_frame_blocks(b"", chunks_of(*reads), "up", None)]
    assert blocks == [b"data: 1\n\ndata: 2\n\n", b"data: 3\n\n: note\n\n", b"data: 4\n\n"]
    assert [frames_of(b) for b in blocks] == [
        [b"data: 1", b"data: 2"],
        [b"data: 3", b": note"],
        [b"data: 4"],
    ]


def test_plain_data_blocks_are_counted_and_others_are_not() -> None:
    assert data_events(b"data: {}\n\ndata: {}\n\n") == 2
    assert data_events(b"data: {}\n\n: note\n\n") == 0
    assert data_events(b"data: {}\n\nevent: x\ndata: {}\n\n") == 0
    assert data_events(b"data: a\ndata: b\n\n") == 0
    assert data_events(b": note\n\ndata: {}\n\n") == 0
