"""Grants: allow-lists as keys and model groups write them, and one narrowed by another."""

from __future__ import annotations

from gateway.mcp.hub import ToolGrant, qualified_name


def test_an_allow_list_grants_servers_and_tools() -> None:
    grant = ToolGrant.of(["docs", "files:read_file", "files:list", "docs:search"])
    assert grant.allows("docs", "anything")
    assert grant.allows("files", "read_file") and grant.allows("files", "list")
    assert not grant.allows("files", "write_file")
    assert not grant.allows_server("tickets") and grant.allows_server("files")


def test_no_allow_list_grants_everything() -> None:
    assert ToolGrant.of(None).allows("any", "tool")
    assert ToolGrant.of_mapping(None).allows("any", "tool")
    assert not ToolGrant.of([]).allows_server("any")


def test_a_model_grant_narrows_a_key_grant() -> None:
    key = ToolGrant.of(["docs", "files:read_file", "tickets"])
    model = ToolGrant.of_mapping({"docs": ["search"], "files": None, "wiki": None})
    both = key.narrowed(model)
    assert both.allows("docs", "search") and not both.allows("docs", "delete")
    assert both.allows("files", "read_file") and not both.allows("files", "list")
    assert not both.allows_server("tickets") and not both.allows_server("wiki")
    assert ToolGrant().narrowed(model) == model
    assert key.narrowed(ToolGrant()) == key


def test_qualified_names_join_server_and_tool() -> None:
    assert qualified_name("docs", "search") == "docs__search"
