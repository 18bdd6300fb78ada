"""Builders for policy tests: candidates from keyword arguments."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import pytest

from policies import Candidate, CandidateFacts, LiveFigures

Make = Callable[..., Candidate]

_LIVE = {f.name for f in fields(LiveFigures)}


def make_candidate(name: str, backend: str = "vllm", **kw: Any) -> Candidate:
    """A candidate; keyword arguments go to LiveFigures or CandidateFacts by field name."""
    live = {k: kw.pop(k) for k in list(kw) if k in _LIVE}
    return Candidate(CandidateFacts(name=name, backend=backend, **kw), LiveFigures(**live))


@pytest.fixture
def make() -> Make:
    return make_candidate
