"""What a sequence's KV holds, by prefix link: filled, trimmed, copied, reported."""

from __future__ import annotations

from backends.llamacpp.held import HeldChains

CHAIN = (("a", 100), ("b", 200), ("c", 400))  # characters


def test_links_follow_the_kv_a_sequence_keeps() -> None:
    held = HeldChains(2)
    assert held.report() == {}
    held.fill(0, CHAIN, 40)  # 40 tokens: depths 10, 20, 40
    assert held.report() == {"a": 10, "b": 20, "c": 40}
    report = held.report()
    assert held.report() is report  # unchanged: the same object
    held.trim(0, 39)  # the last prompt token is always recomputed
    assert held.report() == {"a": 10, "b": 20}
    held.copy(0, 1)
    held.fill(0, (), 50)  # a request without a chain leaves what is held
    held.trim(1, 0)
    assert held.report() == {"a": 10, "b": 20}
    held.trim(0, 9)
    assert held.report() == {}


def test_the_report_is_bounded_keeping_each_chains_ends() -> None:
    held = HeldChains(2, limit=8)
    held.fill(0, tuple((f"x{i}", i + 1) for i in range(10)), 10)
    held.fill(1, (("y", 1),), 1)
    report = held.report()
    assert len(report) <= 8
    assert {"x0", "x1", "x9", "y"} <= set(report)


def test_sequences_name_each_held_sequence_by_its_deepest_link_most_recent_first() -> None:
    held = HeldChains(3)
    held.fill(0, [("a", 10), ("a2", 20)], 40)
    held.fill(2, [("c", 10)], 30)
    assert held.sequences() == (("c", 30), ("a2", 40))
    held.assign(0, [("m", 12)])  # a state moved in: now the most recent
    assert held.sequences() == (("m", 12), ("c", 30))
    held.trim(2, 0)
    assert held.sequences() == (("m", 12),)
