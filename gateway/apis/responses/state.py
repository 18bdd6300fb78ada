"""What the Responses API keeps per app: its stored responses and conversations, and what
it does with tools only OpenAI runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.apis.contract import Services
from gateway.apis.responses.conversations import ConversationStore
from gateway.apis.responses.store import ResponseStore
from gateway.apis.responses.tools import HostedTools
from gateway.config import GatewayConfig
from gateway.state.base import StateStore


@dataclass
class ResponsesState:
    """``hosted_tools``: what ``/v1/responses`` does with tools only OpenAI runs
    (``drop``: reported, ``refuse``), and per model (``hosted_by_model``)."""

    responses: ResponseStore
    conversations: ConversationStore
    hosted_tools: HostedTools = "drop"
    hosted_by_model: dict[str, HostedTools] = field(default_factory=dict)

    def hosted_for(self, model: str) -> HostedTools:
        """What ``/v1/responses`` does with hosted tools for ``model``."""
        return self.hosted_by_model.get(model, self.hosted_tools)

    @classmethod
    def of(cls, store: StateStore, config: GatewayConfig, services: Services) -> ResponsesState:
        settings = config.responses
        state = cls(
            ResponseStore(store, settings.ttl_s, int(settings.max_bytes)),
            ConversationStore(store, max_bytes=int(settings.max_bytes)),
        )
        state.apply(config)
        return state

    def apply(self, config: GatewayConfig) -> None:
        """Take the settings of a (reloaded) config."""
        settings = config.responses
        self.responses.ttl_s = settings.ttl_s
        self.responses.max_bytes = int(settings.max_bytes)
        self.conversations.max_bytes = int(settings.max_bytes)
        self.hosted_tools = settings.hosted_tools
        self.hosted_by_model = {
            name: route.hosted_tools
            for name, route in config.models.items()
            if route.hosted_tools is not None
        }
