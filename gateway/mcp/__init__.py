"""Tools behind the gateway: MCP servers an operator configures, served at ``/mcp`` and
run for hosted ``mcp`` tools on the model APIs (see :mod:`gateway.mcp.hub`)."""
