"""Where a remote API lives, how to log in to it and how long to wait for it: the settings
every deployment behind one shares (each wire API adds its own in its package's
``settings`` module), and the API key read from the environment."""

from __future__ import annotations

import os
from typing import ClassVar

from pydantic import Field

from backends.base import DeploymentSettings


class HTTPDeploymentSettings(DeploymentSettings):
    """Fields shared by deployments behind a remote HTTP API."""

    in_process: ClassVar[bool] = False

    base_url: str = Field(min_length=1)
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    context_length: int | None = Field(default=None, ge=1)
    max_connections: int = Field(default=1024, ge=1)
    health_check: bool = Field(
        default=True, description="probe the upstream in the background while its breaker is open"
    )
    health_path: str | None = Field(
        default=None,
        min_length=1,
        description="what a probe GETs, relative to base_url (default: the API's model list)",
    )

    def upstream_url(self) -> str | None:
        return self.base_url

    def key_variable(self) -> str | None:
        return self.api_key_env


def read_api_key(env_name: str | None) -> str | None:
    """The key held in ``env_name``; ``RuntimeError`` if the variable is named but unset."""
    if env_name is None:
        return None
    key = os.environ.get(env_name)
    if not key:
        raise RuntimeError(f"environment variable {env_name} (api_key_env) is not set")
    return key
