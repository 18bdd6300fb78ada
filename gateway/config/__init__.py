"""The gateway's YAML configuration: typed models (:mod:`~gateway.config.schema`) and their
loading with ``file:line: field`` errors (:mod:`~gateway.config.loading`), and what a config
needs from the machine (:mod:`~gateway.config.checks`: model files, key variables, devices).

It sits below every package that reads it (dispatch, admission, residency, http) and imports
only backends' settings (:data:`backends.registry.DeploymentConfig`) and policies.
"""

from gateway.config.loading import (
    ConfigError,
    ConfigIssue,
    LoadedConfig,
    default_config,
    load_config,
    load_or_report,
    parse_config,
    read_config,
    read_or_report,
)
from gateway.config.schema import (
    CacheRule,
    CORSSettings,
    DeviceSpec,
    GatewayConfig,
    LocalModelsSettings,
    ModelRoute,
    ReliabilitySettings,
    SessionSettings,
)

__all__ = [
    "CORSSettings",
    "CacheRule",
    "ConfigError",
    "ConfigIssue",
    "DeviceSpec",
    "GatewayConfig",
    "LoadedConfig",
    "LocalModelsSettings",
    "ModelRoute",
    "ReliabilitySettings",
    "SessionSettings",
    "default_config",
    "load_config",
    "load_or_report",
    "parse_config",
    "read_config",
    "read_or_report",
]
