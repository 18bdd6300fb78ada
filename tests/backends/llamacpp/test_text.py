"""Text assembly: UTF-8 split across tokens and stop strings split across pieces."""

from __future__ import annotations

from backends.llamacpp.text import StopMatcher, TextAssembler


def test_utf8_split_across_tokens_is_held_until_complete() -> None:
    text = TextAssembler()
    euro = "€".encode()
    assert text.feed(euro[:1]) == ""
    assert text.feed(euro[1:]) == "€"
    assert text.finish() == ""


def test_stop_string_split_across_pieces() -> None:
    matcher = StopMatcher(["END"])
    assert matcher.feed("abc E") == "abc "
    assert matcher.feed("N") == ""
    assert matcher.feed("Dxyz") == ""
    assert matcher.stopped
    assert matcher.flush() == ""


def test_false_start_of_stop_is_released() -> None:
    matcher = StopMatcher(["END"])
    assert matcher.feed("E") == ""
    assert matcher.feed("x") == "Ex"
    assert matcher.feed("EN") == ""
    assert matcher.flush() == "EN"


def test_earliest_of_several_stops_wins() -> None:
    matcher = StopMatcher(["world", "lo w"])
    assert matcher.feed("hello world") == "hel"
    assert matcher.stopped


def test_a_character_cut_at_the_end_is_dropped() -> None:
    text = TextAssembler()
    assert text.feed(b"a" + "€".encode()[:2]) == "a"
    assert text.finish() == ""
