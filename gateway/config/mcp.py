"""``mcp:``: the MCP servers whose tools the gateway fronts (at ``/mcp``, and for hosted
``mcp`` tools), each started by the gateway (``command``) or reached over streamable HTTP
(``url``).

Secrets come from the environment: any ``${NAME}`` in an ``env``, ``headers`` or OAuth
``client_secret`` value is replaced by the variable's value when the config is loaded (a
variable that is not set is an error at its line), and kept as a secret that no log line or
``repr`` shows.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Discriminator,
    Field,
    SecretStr,
    Tag,
    field_validator,
)

SERVER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$")
"""A server's name prefixes its tools' names with ``__``: letters, digits, ``-`` and single
``_``, so that a qualified name splits back one way only."""
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _from_environment(value: object) -> object:
    """``${NAME}`` replaced by the variable's value (an error naming it when unset)."""
    if isinstance(value, SecretStr):
        return value
    if not isinstance(value, str):
        return value
    missing = [m.group(1) for m in _REFERENCE.finditer(value) if m.group(1) not in os.environ]
    if missing:
        raise ValueError(f"the environment variable {missing[0]} is not set")
    return SecretStr(_REFERENCE.sub(lambda m: os.environ[m.group(1)], value))


EnvText = Annotated[SecretStr, BeforeValidator(_from_environment)]
"""Text that may name environment variables as ``${NAME}``; a secret once resolved."""


class OAuthClientCredentials(BaseModel):
    """An OAuth 2 client-credentials grant: a token fetched from ``token_url`` and sent as
    ``Authorization: Bearer``, kept until it expires."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_url: str = Field(pattern=r"^https?://")
    client_id: str = Field(min_length=1)
    client_secret: EnvText
    scope: str | None = None


class _ServerBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(default=30.0, gt=0, le=3600, description="per call and per list")
    max_concurrency: int = Field(default=8, ge=1, le=1024, description="calls at once")
    max_concurrency_per_key: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="... of one API key (default: half of max_concurrency, at least 1), so "
        "one key's calls leave room for the others",
    )
    max_result_bytes: ByteSize = Field(
        default=ByteSize(4 * 1024 * 1024),
        ge=1024,
        description="a tool result larger than this fails the call instead of coming back",
    )
    tools: list[str] | None = Field(
        default=None, description="the tools offered (none: all the server lists)"
    )


class StdioServer(_ServerBase):
    """A server the gateway starts (``command``), restarts when it dies, and stops."""

    kind: Literal["stdio"] = "stdio"
    command: list[str] = Field(min_length=1)
    env: dict[str, EnvText] = Field(default_factory=dict)
    cwd: str | None = None

    @field_validator("command")
    @classmethod
    def _program(cls, command: list[str]) -> list[str]:
        if not command[0].strip():
            raise ValueError("the first item must name the program to run")
        return command


class HttpServer(_ServerBase):
    """A remote server reached over streamable HTTP."""

    kind: Literal["http"] = "http"
    url: str = Field(pattern=r"^https?://[^/\s]+")
    headers: dict[str, EnvText] = Field(default_factory=dict)
    oauth: OAuthClientCredentials | None = None

    @field_validator("headers")
    @classmethod
    def _header_names(cls, headers: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name in headers:
            if not re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", name):
                raise ValueError(f"{name!r} is not an HTTP header name")
        return headers


def _server_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "stdio" if "command" in value else "http"
    return str(getattr(value, "kind", "http"))


def _server_name(name: str) -> str:
    if len(name) > 48 or not SERVER_NAME.match(name):
        raise ValueError(
            f"{name!r} cannot name a server: use up to 48 letters, digits, '-' and single "
            "'_' (its tools are offered as <server>__<tool>)"
        )
    return name


ServerName = Annotated[str, AfterValidator(_server_name)]

McpServer = Annotated[
    Annotated[StdioServer, Tag("stdio")] | Annotated[HttpServer, Tag("http")],
    Discriminator(_server_kind),
]


class McpSettings(BaseModel):
    """``mcp:``: the servers, and how long a server's tool list is kept."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: dict[ServerName, McpServer] = Field(default_factory=dict)
    list_ttl_s: float = Field(
        default=30.0, ge=0, description="a server's tool list is kept this long"
    )
    session_secret: EnvText | None = Field(
        default=None,
        description="signs /mcp session ids (default: one kept in the state store)",
    )

    @property
    def enabled(self) -> bool:
        """Whether any server is configured."""
        return bool(self.servers)


McpToolGrant = dict[str, list[str] | None]
"""Servers mapped to the tools allowed of each (``null``: all of that server's tools)."""
