"""The gateway's YAML configuration: typed models (:mod:`~gateway.config.schema`) and their
loading with ``file:line: field`` errors (:mod:`~gateway.config.loading`).

It sits below every package that reads it (dispatch, admission, residency, http) and imports
only backends' settings (:data:`backends.registry.DeploymentConfig`) and policies.
"""

from gateway.config.loading import (
    ConfigError,
    ConfigIssue,
    default_config,
    load_config,
    load_or_report,
    parse_config,
)
from gateway.config.schema import (
    CacheRule,
    DeviceSpec,
    GatewayConfig,
    LocalModelsSettings,
    ModelRoute,
    ReliabilitySettings,
)

__all__ = [
    "CacheRule",
    "ConfigError",
    "ConfigIssue",
    "DeviceSpec",
    "GatewayConfig",
    "LocalModelsSettings",
    "ModelRoute",
    "ReliabilitySettings",
    "default_config",
    "load_config",
    "load_or_report",
    "parse_config",
]
