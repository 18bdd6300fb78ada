"""The config file's schema: typed, frozen models that reject unknown keys.

Each section's model lives here, beside :class:`GatewayConfig`, so the config sits below the
packages that read it (dispatch, admission, residency) and imports none of them.
"""

from __future__ import annotations

import functools
import re
from typing import Literal

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    IPvAnyNetwork,
    ValidationInfo,
    field_validator,
    model_validator,
)

from backends.registry import DeploymentConfig
from gateway.config.defaults import default_for
from gateway.config.hosted import HostedSettings
from gateway.config.mcp import McpSettings, McpToolGrant
from policies.confidence import CascadeRule
from policies.policy import Policy, PolicyField


class DeviceSpec(BaseModel):
    """A device declared in the config, to plan for a machine other than this one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    kind: Literal["cuda", "metal", "cpu"]
    memory_gb: float = Field(gt=0)


class ReliabilitySettings(BaseModel):
    """Retries, back-off, circuit breakers and their background probes, for every route
    (see :mod:`gateway.dispatch.health.breakers`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    retries: int = Field(default=1, ge=0, le=5, description="extra tries on one deployment")
    backoff_base_s: float = Field(
        default=0.5, ge=0, description="full-jitter back-off: retry n waits up to base x 2^n"
    )
    backoff_max_s: float = Field(default=4.0, ge=0, description="the back-off's ceiling")
    max_retry_after_s: float = Field(
        default=5.0, ge=0, description="a longer retry-after moves on to the next deployment"
    )
    failure_threshold: int = Field(default=3, ge=1)
    cooldown_s: float = Field(default=5.0, gt=0, description="the first time a breaker stays open")
    max_cooldown_s: float = Field(
        default=10.0, gt=0, description="cap of the cooldown, which doubles on each re-opening"
    )
    probe_interval_s: float | None = Field(
        default=2.0, gt=0, description="health probes of open deployments; none: no probes"
    )
    flap_window_s: float = Field(
        default=60.0,
        ge=0,
        description="a deployment that fails again within this many seconds of recovering is "
        "flapping: its breaker opens at that first failure; 0: never",
    )


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
    policy: PolicyField = Field(
        default_factory=Policy.default,
        description="how a deployment is picked; none: cached_prefix over interchangeable "
        "engines, first otherwise (docs/routing.md)",
    )
    ttft_ms: float | None = Field(
        default=None,
        gt=0,
        description="with no policy: the latency target of the default over interchangeable "
        "engines (a home predicted to miss it spills to another candidate)",
    )
    fallback: bool = True
    context_fallback: bool = Field(
        default=True,
        description="with fallback: a prompt too long for one candidate moves to a larger one",
    )
    resume: bool = Field(
        default=True,
        description="with fallback: a stream that fails mid-answer is continued on the next "
        "candidate",
    )
    max_resumes: int = Field(default=1, ge=1, le=5, description="continuations of one stream")
    retry_after_wait_s: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description="a 429/503 asking to wait this long or less is waited out rather than "
        "moving to a candidate of another model or a dearer one",
    )
    cache: CacheRule | None = None
    hosted_tools: Literal["drop", "refuse"] | None = Field(
        default=None,
        description="tools only their vendor runs (Responses' web_search..., Gemini's "
        "googleSearch...), for this model (default: responses.hosted_tools)",
    )
    cascade: CascadeRule | None = Field(
        default=None,
        description="answer with the best-ranked candidate; a larger one when it is unsure",
    )
    mcp_tools: McpToolGrant | None = Field(
        default=None,
        description="the MCP servers (and tools of each) this model may be offered as hosted "
        "tools; none: all",
    )

    @model_validator(mode="after")
    def _target_without_policy(self) -> ModelRoute:
        if self.ttft_ms is not None and "policy" in self.model_fields_set:
            raise ValueError(
                "ttft_ms is the default policy's target: with a policy, write "
                "{slo: {ttft_ms: ...}} in it"
            )
        return self

    @model_validator(mode="after")
    def _cascade_can_escalate(self) -> ModelRoute:
        if self.cascade is not None and len(self.candidates) < 2:
            raise ValueError("cascade needs at least two candidates (one to escalate to)")
        if self.cascade is not None and not self.fallback:
            raise ValueError("cascade escalates along the candidates: it needs fallback: true")
        return self


class HTTPSettings(BaseModel):
    """``http:``: how the gateway treats its clients."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    send_timeout_s: float = Field(
        default=30.0, gt=0, description="a client that takes no bytes this long is dropped"
    )
    protect_ops: bool = Field(
        default=False, description="/metrics and readiness figures need the master key"
    )
    body_buffers_mb: float = Field(
        default=256.0,
        ge=10.0,
        description="request bodies still arriving hold at most this much in all (503 past it)",
    )
    body_buffers_per_key_mb: float = Field(
        default=64.0,
        ge=10.0,
        description="... and for one key (429 past it), so one key's uploads spare the others",
    )
    max_sockets: int = Field(
        default=1024,
        ge=1,
        description="WebSockets open at once (each holds a connection until it closes)",
    )
    max_sockets_per_key: int = Field(
        default=32, ge=1, description="... and for one key, so one key's sockets spare the others"
    )
    socket_idle_s: float = Field(
        default=600.0, gt=0, description="a WebSocket silent this long is closed"
    )
    trusted_proxies: list[IPvAnyNetwork] = Field(
        default_factory=list,
        description="reverse proxies whose X-Forwarded-For names the client (addresses or "
        "networks); none by default, loopback included: the peer is the client",
    )


class ResponsesSettings(BaseModel):
    """``responses:``: the responses ``/v1/responses`` stores (``store``, the default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl_s: float = Field(default=86_400.0, gt=0, description="how long a stored response lives")
    max_bytes: ByteSize = Field(
        default=ByteSize(256 * 1024 * 1024),
        gt=0,
        description="stored responses kept in all (every worker and replica), oldest dropped "
        "first (e.g. 256MiB)",
    )
    hosted_tools: Literal["drop", "refuse"] = Field(
        default="drop",
        description="tools only their vendor runs (Responses' web_search..., Gemini's "
        "googleSearch...): left out and named in the "
        "x-shunter-dropped header (drop), or a 400 (refuse)",
    )


class LoopGuardSettings(BaseModel):
    """``sessions.loop_guard``: stop a session whose agent keeps making the same tool call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repeats: int | None = Field(
        default=None,
        ge=2,
        description="refuse a request whose history ends with this many identical "
        "consecutive tool calls (name and arguments); none: off",
    )


class SessionSettings(BaseModel):
    """``sessions:``: what one agent session may use, for every key (a key's own session
    limits win). A session is one conversation of one key (see docs/state-and-keys.md, Sessions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    budget_usd: float | None = Field(default=None, gt=0, description="dollars per session")
    max_tokens: int | None = Field(default=None, ge=1, description="tokens per session, in all")
    rpm: int | None = Field(default=None, ge=1, description="requests per minute per session")
    tpm: int | None = Field(default=None, ge=1, description="tokens per minute per session")
    idle_ttl_s: float = Field(
        default=3600.0, gt=0, description="a session idle this long is forgotten (its books)"
    )
    loop_guard: LoopGuardSettings = LoopGuardSettings()
    new_per_key: int | None = Field(
        default=100,
        ge=1,
        description="sessions a key may start per new_window_s while its sessions have "
        "limits (a new session id does not escape a stopped one); none: no cap",
    )
    new_window_s: int = Field(
        default=3600, ge=1, description="the window of new_per_key, in seconds"
    )


_ORIGIN = re.compile(r"^https?://[^/\s]+$")
EXPOSED_HEADERS = (
    "x-request-id",
    "x-shunter-deployment",
    "x-shunter-route",
    "x-shunter-cache",
    "x-shunter-cascade-usage",
    "x-shunter-upstream-model",
    "x-shunter-token-count",
    "x-shunter-dropped",
    "retry-after",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
)
"""Response headers a page may read by default: the request id, the route and the limits."""


class CORSSettings(BaseModel):
    """``cors:``: which web pages (origins) may call the gateway from a browser. Off (no
    origins) by default. Read at start: a change needs a restart."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allow_origins: list[str] = Field(
        default_factory=list,
        description="origins such as https://app.example.com, or * for any page",
    )
    allow_headers: list[str] = Field(
        default_factory=lambda: ["*"], description="request headers a page may send"
    )
    expose_headers: list[str] = Field(
        default_factory=lambda: list(EXPOSED_HEADERS),
        description="response headers a page may read",
    )
    max_age_s: int = Field(default=600, ge=0, description="how long a browser keeps a preflight")

    @field_validator("allow_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            if origin != "*" and not _ORIGIN.match(origin):
                raise ValueError(
                    f"{origin!r} is not an origin: write scheme://host[:port] with no path, "
                    "e.g. https://app.example.com, or * for any page"
                )
        return origins

    @property
    def enabled(self) -> bool:
        """Whether any page may call the gateway from a browser."""
        return bool(self.allow_origins)

    @property
    def listed_origins(self) -> frozenset[str]:
        """The origins named one by one (``*`` aside): pages trusted even in open mode."""
        return frozenset(o for o in self.allow_origins if o != "*")


SKIP_REFERENCES = "skip_references"
"""Validation context key: the loader has checked the references between sections itself
(locating each problem at its line), so :class:`GatewayConfig` does not check them again."""


class GatewayConfig(BaseModel):
    """The whole routing configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    devices: list[DeviceSpec] = Field(default_factory=list)
    deployments: list[DeploymentConfig] = Field(min_length=1)
    models: dict[str, ModelRoute] = Field(min_length=1)
    reliability: ReliabilitySettings = ReliabilitySettings()
    local_models: LocalModelsSettings = LocalModelsSettings()
    http: HTTPSettings = HTTPSettings()
    cors: CORSSettings = CORSSettings()
    responses: ResponsesSettings = ResponsesSettings()
    mcp: McpSettings = McpSettings()
    sessions: SessionSettings = SessionSettings()
    hosted: HostedSettings = HostedSettings()

    @model_validator(mode="after")
    def _references_resolve(self, info: ValidationInfo) -> GatewayConfig:
        if info.context and info.context.get(SKIP_REFERENCES):
            return self
        names = [d.name for d in self.deployments]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"deployment names must be unique; repeated: {', '.join(duplicates)}")
        known = set(names)
        for model, route in self.models.items():
            missing = [c for c in route.candidates if c not in known]
            if missing:
                raise ValueError(f"model {model!r} names unknown deployments: {', '.join(missing)}")
            unknown = sorted(set(route.mcp_tools or ()) - set(self.mcp.servers))
            if unknown:
                raise ValueError(f"model {model!r} names unknown MCP servers: {', '.join(unknown)}")
        for kind, stand_in in self.hosted.stand_ins.items():
            if stand_in.server not in self.mcp.servers:
                raise ValueError(
                    f"hosted.stand_ins.{kind} names the unknown MCP server {stand_in.server!r}"
                )
        return self

    @model_validator(mode="after")
    def _default_policies(self) -> GatewayConfig:
        """Each model naming no policy gets the default its candidates call for."""
        deployments = {d.name: d for d in self.deployments}
        models = dict(self.models)
        for model, route in self.models.items():
            if "policy" in route.model_fields_set:
                continue
            policy = default_for(route.candidates, deployments, route.ttft_ms)
            if policy is not None:
                models[model] = route.model_copy(update={"policy": policy})
        return self.model_copy(update={"models": models})

    @functools.cached_property
    def _by_name(self) -> dict[str, DeploymentConfig]:
        return {d.name: d for d in self.deployments}

    def deployment(self, name: str) -> DeploymentConfig:
        return self._by_name[name]
