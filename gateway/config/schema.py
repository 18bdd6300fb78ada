"""The config file's schema: typed, frozen models that reject unknown keys.

Each section's model lives here, beside :class:`GatewayConfig`, so the config sits below the
packages that read it (dispatch, admission, residency) and imports none of them.
"""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, field_validator, model_validator

from backends.registry import DeploymentConfig
from policies.policy import Policy, PolicyField


class DeviceSpec(BaseModel):
    """A device declared in the config, to plan for a machine other than this one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    kind: Literal["cuda", "metal", "cpu"]
    memory_gb: float = Field(gt=0)


class ReliabilitySettings(BaseModel):
    """Retry and breaker knobs, per model route."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    retries: int = Field(default=1, ge=0, le=5, description="extra tries on one deployment")
    backoff_base_s: float = Field(default=0.05, ge=0)
    backoff_max_s: float = Field(default=2.0, ge=0)
    max_retry_after_s: float = Field(
        default=5.0, ge=0, description="a longer retry-after moves on to the next deployment"
    )
    failure_threshold: int = Field(default=3, ge=1)
    cooldown_s: float = Field(default=5.0, gt=0)
    max_cooldown_s: float = Field(default=120.0, gt=0)


class LocalModelsSettings(BaseModel):
    """``local_models:``: what the gateway's on-demand local models may use together."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_budget: ByteSize | None = Field(
        default=None, description="bytes, or e.g. 6GiB / 512MiB; none: nothing is evicted"
    )

    @field_validator("memory_budget")
    @classmethod
    def _positive(cls, value: ByteSize | None) -> ByteSize | None:
        if value is not None and value <= 0:
            raise ValueError("must be more than 0 bytes")
        return value


class CacheRule(BaseModel):
    """Caching for one public model name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl_s: float = Field(default=300.0, gt=0)
    any_temperature: bool = False


class ModelRoute(BaseModel):
    """A public model name: the deployments that can serve it and how to pick one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidates: list[str] = Field(min_length=1)
    policy: PolicyField = Field(default_factory=Policy.default)
    fallback: bool = True
    cache: CacheRule | None = None


class HTTPSettings(BaseModel):
    """``http:``: how the gateway treats its clients."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    send_timeout_s: float = Field(
        default=30.0, gt=0, description="a client that takes no bytes this long is dropped"
    )
    protect_ops: bool = Field(
        default=False, description="/metrics and readiness figures need the master key"
    )


class GatewayConfig(BaseModel):
    """The whole routing configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    devices: list[DeviceSpec] = Field(default_factory=list)
    deployments: list[DeploymentConfig] = Field(min_length=1)
    models: dict[str, ModelRoute] = Field(min_length=1)
    reliability: ReliabilitySettings = ReliabilitySettings()
    local_models: LocalModelsSettings = LocalModelsSettings()
    http: HTTPSettings = HTTPSettings()

    @model_validator(mode="after")
    def _references_resolve(self) -> GatewayConfig:
        names = [d.name for d in self.deployments]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"deployment names must be unique; repeated: {', '.join(duplicates)}")
        known = set(names)
        for model, route in self.models.items():
            missing = [c for c in route.candidates if c not in known]
            if missing:
                raise ValueError(f"model {model!r} names unknown deployments: {', '.join(missing)}")
        return self

    @functools.cached_property
    def _by_name(self) -> dict[str, DeploymentConfig]:
        return {d.name: d for d in self.deployments}

    def deployment(self, name: str) -> DeploymentConfig:
        return self._by_name[name]
