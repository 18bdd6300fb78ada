"""Hosted tools run by the gateway itself on any deployment: the ``mcp`` tools of
``/v1/responses``, the ``mcp_servers`` of ``/v1/messages``, and stand-ins for providers'
server tools (``web_search``), through the MCP servers of :mod:`gateway.mcp`."""
