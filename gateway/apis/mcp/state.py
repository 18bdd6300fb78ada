"""What ``/mcp`` keeps per app: its 2025-era sessions."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.apis.contract import Services
from gateway.apis.mcp.sessions import McpSessions
from gateway.config import GatewayConfig
from gateway.state.base import StateStore


@dataclass
class McpState:
    sessions: McpSessions

    @classmethod
    def of(cls, store: StateStore, config: GatewayConfig, services: Services) -> McpState:
        """Sessions signed with the config's secret, else one derived from the master key
        (else one kept in the state store)."""
        secret = config.mcp.session_secret
        if secret is not None:
            signing: bytes | None = secret.get_secret_value().encode()
        else:
            signing = services.admission.keys.derived_secret("mcp-session")
        return cls(McpSessions(store, signing))
