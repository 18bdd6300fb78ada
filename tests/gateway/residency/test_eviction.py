"""The LRU eviction choice: which idle models to unload so that another fits the budget."""

from __future__ import annotations

import pytest

from gateway.residency.eviction import CannotFitError, LoadedModel, choose_evictions


def _m(name: str, gib: int, used: float, busy: bool = False) -> LoadedModel:
    return LoadedModel(name, gib << 30, used, busy)


def test_choose_evictions() -> None:
    loaded = [_m("a", 4, used=30), _m("b", 2, used=10), _m("c", 3, used=20)]
    gib = 1 << 30
    assert choose_evictions(loaded, 1 * gib, 10 * gib) == []  # 9 used, 1 free
    assert choose_evictions(loaded, 2 * gib, 10 * gib) == ["b"]  # least recently used first
    assert choose_evictions(loaded, 5 * gib, 10 * gib) == ["b", "c"]
    assert choose_evictions(loaded, 10 * gib, 10 * gib) == ["b", "c", "a"]
    assert choose_evictions([], 3 * gib, 4 * gib) == []
    tie = [_m("y", 1, used=5), _m("x", 1, used=5)]
    assert choose_evictions(tie, 2 * gib, 2 * gib) == ["x", "y"]  # deterministic ties


def test_choose_evictions_skips_busy_models() -> None:
    gib = 1 << 30
    loaded = [_m("old-busy", 4, used=1, busy=True), _m("new", 2, used=50), _m("mid", 2, used=20)]
    assert choose_evictions(loaded, 3 * gib, 8 * gib) == ["mid", "new"]
    with pytest.raises(CannotFitError, match="busy"):
        choose_evictions(loaded, 5 * gib, 8 * gib)
    with pytest.raises(CannotFitError, match="budget"):
        choose_evictions([], 9 * gib, 8 * gib)
