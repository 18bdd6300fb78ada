"""What the hosted-tool loop needs of the app: the settings, the configured servers' hub,
and who the caller is (its key's grant, narrowed by its model group's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.admission.keys import KeyInfo
from gateway.config.hosted import HostedSettings
from gateway.config.mcp import HttpServer
from gateway.config.schema import GatewayConfig
from gateway.errors import InvalidRequestError
from gateway.hosted.toolset import StandInTool
from gateway.mcp.hub import ToolCaller, ToolGrant, ToolHub

if TYPE_CHECKING:
    from gateway.hosted.remote import RemoteServer


@dataclass
class HostedContext:
    """One per app (replaced on a config reload): ``hub`` serves the configured servers
    (``None``: none configured), ``server_urls`` the URL of each remote one (a request
    naming a server by URL means that server), ``model_grants`` each model group's
    grant."""

    settings: HostedSettings = field(default_factory=HostedSettings)
    hub: ToolHub | None = None
    server_urls: Mapping[str, str] = field(default_factory=dict)
    model_grants: Mapping[str, ToolGrant] = field(default_factory=dict)

    def caller(self, key: KeyInfo, model: str, request_id: str = "") -> ToolCaller:
        """The caller as the hub sees it: the key's grant within its model group's."""
        grant = key_grant(key)
        model_grant = self.model_grants.get(model)
        if model_grant is not None:
            grant = grant.narrowed(model_grant)
        return ToolCaller(key.id, grant, request_id)

    @property
    def runs_mcp(self) -> bool:
        """Whether the gateway runs MCP tools at all (servers configured, or a request's
        allowed): else a request's ``mcp`` tools meet the hosted-tool setting
        (``responses.hosted_tools``) as other provider tools do."""
        servers = self.hub.servers if self.hub is not None else ()
        return bool(servers) or self.settings.request_servers

    def served(self) -> frozenset[str]:
        """The tool types of ``/v1/responses`` the gateway runs itself."""
        return self.stand_in_kinds() | ({"mcp"} if self.runs_mcp else set())

    def stand_in_kinds(self) -> frozenset[str]:
        """The provider tool types run through a configured MCP tool (of a server that is
        configured)."""
        servers = self.hub.servers if self.hub is not None else ()
        stand_ins = self.settings.stand_ins.items()
        return frozenset(kind for kind, spec in stand_ins if spec.server in servers)

    def stand_in(self, kind: str, where: str) -> StandInTool:
        """The configured MCP tool that runs the provider tool ``kind`` (at ``where`` in
        the request); only for a kind of :meth:`stand_in_kinds`."""
        assert self.hub is not None
        spec = self.settings.stand_ins[kind]
        return StandInTool(
            kind,
            spec.server,
            spec.tool,
            spec.argument,
            spec.description,
            spec.max_length,
            self.hub,
            where,
        )

    @classmethod
    def of(cls, config: GatewayConfig, hub: ToolHub | None) -> HostedContext:
        """The context of ``config``, its servers served by ``hub``."""
        urls = {
            name: server.url
            for name, server in config.mcp.servers.items()
            if isinstance(server, HttpServer)
        }
        grants = {
            model: ToolGrant.of_mapping(route.mcp_tools)
            for model, route in config.models.items()
            if route.mcp_tools is not None
        }
        return cls(config.hosted, hub, urls, grants)

    def configured(self, label: str | None, url: str | None) -> str | None:
        """The configured server a request names by its label or its URL, if any."""
        servers = self.hub.servers if self.hub is not None else ()
        if url is not None:
            return next((s for s, u in self.server_urls.items() if _same(u, url)), None)
        return label if label in servers else None

    def remote(self, label: str, url: str, headers: Mapping[str, str], where: str) -> RemoteServer:
        """A server the request names by URL: refused (a 400 naming ``where``) unless the
        operator allows request servers."""
        if not self.settings.request_servers:
            raise InvalidRequestError(
                f"{where}: this gateway runs only the MCP servers it is configured with; "
                "name one of them, or ask the operator to allow request servers.",
                param=where,
            )
        if not url.startswith(("http://", "https://")):
            raise InvalidRequestError(
                f"{where}: the MCP server's URL must be http(s).", param=where
            )
        # the MCP client library is loaded by the first request that names a server
        from gateway.hosted.remote import RemoteServer

        timeout = self.settings.request_server_timeout_s
        return RemoteServer(label, url, headers, timeout)


def _same(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def key_grant(key: KeyInfo) -> ToolGrant:
    """The MCP servers and tools ``key`` may use (its ``--mcp`` allow-list)."""
    return ToolGrant.of(key.mcp)
