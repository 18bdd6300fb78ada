"""What ``check-config`` says about model sizes and cascades.

* A declared ``params_b`` far (more than 20%) from what the model's own file holds is a
  note: routing trusts the declared figure, which may be a typo (``7`` for ``0.7``) or name
  another model than the file.
* A cascade judges its first step on the token logprobs of the answer. A deployment that
  cannot return them (Anthropic, an upstream with ``logprobs: false``) is never judged, so
  it serves whatever reaches it: ranked first, the cascade would never escalate. That is
  refused, at the line of the model's ``cascade``. The ranking checked is the policy's
  rankers over what is known before anything is measured (sizes, prices, the configured
  order), which is how the first request is routed.
"""

from __future__ import annotations

from collections.abc import Mapping

from backends.registry import DeploymentConfig
from gateway.config.loading import ConfigIssue, LoadedConfig
from gateway.planner import ModelSize
from policies import Candidate, CandidateFacts, Policy, Pricing, RankStep, RequestFacts


def size_notes(loaded: LoadedConfig) -> list[str]:
    """A note for every declared size that the model's file contradicts."""
    notes = []
    for index, settings in enumerate(loaded.config.deployments):
        if settings.params_b is None:
            continue
        try:
            found = settings.file_size()
        except (OSError, ValueError):
            continue  # an unreadable file is reported as such by the machine checks
        declared = ModelSize(settings.params_b)
        if found is not None and declared.differs(found):
            where = loaded.issue(
                ("deployments", index, "params_b"),
                f"declared {declared.describe()}, but the model file holds "
                f"{found.describe()}: routing uses the declared size",
            )
            notes.append(str(where))
    return notes


def cascade_issues(
    loaded: LoadedConfig, sizes: Mapping[str, ModelSize | None] | None = None
) -> list[ConfigIssue]:
    """A cascade whose first step cannot be judged (see the module doc). ``sizes``: each
    deployment's size when the caller knows them already (else read here)."""
    config = loaded.config
    issues = []
    for model, route in config.models.items():
        if route.cascade is None:
            continue
        deployments = [config.deployment(name) for name in route.candidates]
        first = first_ranked(route.policy, deployments, sizes)
        if first is not None and not first.returns_logprobs():
            issues.append(
                loaded.issue(
                    ("models", model, "cascade"),
                    f"the cascade starts at {first.name!r}, which cannot return token "
                    "logprobs, so its answers can never be judged: rank a deployment that "
                    "can first (for instance policy: [healthy, capable, smallest]), or "
                    "drop the cascade",
                )
            )
    return issues


def first_ranked(
    policy: Policy,
    deployments: list[DeploymentConfig],
    sizes: Mapping[str, ModelSize | None] | None = None,
) -> DeploymentConfig | None:
    """The deployment ``policy``'s rankers put first before anything is measured."""
    order = static_order(policy, deployments, sizes)
    return order[0] if order else None


def static_order(
    policy: Policy,
    deployments: list[DeploymentConfig],
    sizes: Mapping[str, ModelSize | None] | None = None,
) -> list[DeploymentConfig]:
    """``deployments`` as ``policy``'s rankers order them before anything is measured (by
    size, price, the configured order): the steps a cascade walks on a first request."""
    rankers = Policy(tuple(step for step in policy.steps if isinstance(step, RankStep)))
    pool = [_candidate(d, sizes[d.name] if sizes else d.model_size()) for d in deployments]
    decision = rankers.route(RequestFacts(prompt_tokens=0), pool)
    by_name = {d.name: d for d in deployments}
    return [by_name[name] for name in decision.names]


def _candidate(settings: DeploymentConfig, size: ModelSize | None) -> Candidate:
    price = settings.price
    pricing = Pricing()
    if price is not None:
        per_token = price.input_per_1m or price.output_per_1m or price.usd_per_hour is None
        pricing = Pricing(
            input_per_1m=price.input_per_1m if per_token else None,
            output_per_1m=price.output_per_1m if per_token else None,
            usd_per_hour=price.usd_per_hour,
        )
    facts = CandidateFacts(
        name=settings.name,
        backend=settings.backend,
        pricing=pricing,
        params_b=None if size is None else size.params_b,
        active_params_b=None if size is None else size.active_params_b,
        size_source=None if size is None else size.source,
    )
    return Candidate(facts)
