from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policies import (
    DEFAULT_POLICY,
    Candidate,
    Hedge,
    Policy,
    PolicyField,
    Primitive,
    RankStep,
    RequestFacts,
    RouteContext,
    Score,
    builtin_primitives,
)
from policies.filters import FitsMemory
from policies.slo import Slo

Make = Callable[..., Candidate]


def test_issue_example_parses_in_order() -> None:
    policy = Policy.parse(
        ["healthy", "fits_memory", "capable", {"slo": {"ttft_ms": 500, "tpot_ms": 50}}, "cheapest"]
    )
    assert [s.name for s in policy.steps] == [
        "healthy",
        "fits_memory",
        "capable",
        "slo",
        "cheapest",
    ]
    slo = policy.steps[3]
    assert isinstance(slo, Slo)
    assert (slo.args.ttft_ms, slo.args.tpot_ms, slo.args.mode) == (500, 50, "demote")
    assert policy.hedge is None


def test_name_with_null_args_and_mapping_args() -> None:
    policy = Policy.parse([{"healthy": None}, {"fits_memory": {"allow": ["fits"]}}, "first"])
    fits = policy.steps[1]
    assert isinstance(fits, FitsMemory)
    assert fits.args.allow == ("fits",)
    assert "allow=fits" in policy.describe()


def test_hedge_item_is_data_not_a_step() -> None:
    policy = Policy.parse(["healthy", "first", {"hedge": {"after_ms": 300}}])
    assert [s.name for s in policy.steps] == ["healthy", "first"]
    assert policy.hedge == Hedge(after_ms=300)
    assert "hedge after 300ms" in policy.describe()


def test_hedge_keyword() -> None:
    policy = Policy.parse(["first"], hedge={"after_ms": 250, "max_extra": 2})
    assert policy.hedge == Hedge(after_ms=250, max_extra=2)
    with pytest.raises(ValueError, match="hedge: after_ms"):
        Policy.parse(["first"], hedge={"after_ms": -1})


def test_unknown_primitive_names_step_and_known_ones() -> None:
    with pytest.raises(ValueError, match=r"policy step 1 \(cheapst\): unknown primitive") as err:
        Policy.parse(["healthy", "cheapst"])
    assert "cheapest" in str(err.value)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ([{"slo": {"ttft": 500}}], r"policy step 0 \(slo\): ttft: Extra inputs"),
        ([{"slo": {}}], r"policy step 0 \(slo\): .*set ttft_ms or tpot_ms"),
        ([{"slo": {"ttft_ms": -5}}], r"policy step 0 \(slo\): ttft_ms: Input should be greater"),
        (["first", {"fastest": {"by": "speed"}}], r"policy step 1 \(fastest\): by:"),
        ([{"within_budget": None}], r"policy step 0 \(within_budget\): .*max_usd_per_request"),
        ([{"healthy": {"max_error_rate": 2}}], r"policy step 0 \(healthy\): max_error_rate"),
        ([{"cheapest": {"x": 1}}], r"policy step 0 \(cheapest\): x: Extra inputs"),
        ([{"slo": 500}], r"policy step 0 \(slo\): .*dictionary"),
        ([{"healthy": None, "first": None}], r"policy step 0: expected a name or a one-key"),
        ([42], r"policy step 0: expected a name"),
        ([{"hedge": {"after_ms": 0}}], r"policy step 0 \(hedge\): after_ms"),
    ],
)
def test_bad_steps_raise_value_error_naming_the_step(raw: list[object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        Policy.parse(raw)


def test_not_a_list_or_empty() -> None:
    with pytest.raises(ValueError, match="must be a list"):
        Policy.parse("healthy")
    with pytest.raises(ValueError, match="no steps"):
        Policy.parse([{"hedge": {"after_ms": 10}}])


def test_default_policy() -> None:
    policy = Policy.default()
    assert tuple(s.name for s in policy.steps) == DEFAULT_POLICY
    assert Policy.parse(None).describe() == policy.describe()


def test_registry_covers_issue_primitives() -> None:
    names = set(builtin_primitives())
    assert names == {
        "healthy",
        "capable",
        "fits_memory",
        "within_budget",
        "cheapest",
        "fastest",
        "least_loaded",
        "weighted",
        "affinity",
        "slo",
        "first",
        "smallest",
        "largest",
        "size",
        "cached_prefix",
    }
    assert all(p.summary for p in builtin_primitives().values())


class _ReverseArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    factor: float = 1.0


class _Reverse(RankStep):
    """Last configured first."""

    name = "reverse"
    args_model = _ReverseArgs

    def __init__(self, args: _ReverseArgs) -> None:
        self.args = args

    def score(self, ctx: RouteContext, cand: Candidate) -> Score:
        return Score(-self.args.factor * int(cand.name[-1]), "reversed")


def test_custom_registry_extends_builtins(make: Make) -> None:
    registry = builtin_primitives() | {"reverse": Primitive.of(_Reverse)}
    policy = Policy.parse(["healthy", {"reverse": {"factor": 2}}], registry=registry)
    decision = policy.route(RequestFacts(prompt_tokens=10), [make("d1"), make("d2"), make("d3")])
    assert decision.names == ["d3", "d2", "d1"]
    with pytest.raises(ValueError, match="unknown primitive 'reverse'"):
        Policy.parse(["reverse"])


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: PolicyField = Field(default_factory=Policy.default)


def test_policy_field_validates_at_config_load() -> None:
    raw = ["healthy", {"slo": {"ttft_ms": 500}}, "cheapest"]
    config = _Config.model_validate({"policy": raw})
    assert config.policy.describe() == "healthy > slo(ttft_ms=500.0) > cheapest"
    assert config.model_dump() == {"policy": raw}
    assert _Config().policy.describe() == Policy.default().describe()
    with pytest.raises(ValidationError) as err:
        _Config.model_validate({"policy": ["healthy", {"slo": {"ttfx": 5}}]})
    assert err.value.errors()[0]["loc"] == ("policy",)
    assert "policy step 1 (slo): ttfx: Extra inputs" in str(err.value)
    with pytest.raises(ValidationError, match="must be a list"):
        _Config.model_validate({"policy": 3})
