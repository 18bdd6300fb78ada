"""Tools behind the gateway: MCP servers an operator configures (``mcp:``), served at
``/mcp`` and run for hosted ``mcp`` tools on the model APIs.

* :mod:`~gateway.mcp.hub`: the contract, :class:`~gateway.mcp.hub.ToolHub` with its
  caller, grant, tool, listing, result and errors;
* :mod:`~gateway.mcp.servers`: :class:`~gateway.mcp.servers.McpHub`, the hub of one
  config, and :class:`~gateway.mcp.servers.HubSlot`, the app's current hub
  (``app.state.mcp.hub``), replaced when a reload changes ``mcp:``;
* :mod:`~gateway.mcp.upstream`: one server's supervised connection, bounded in calls and
  time; :mod:`~gateway.mcp.transports` and :mod:`~gateway.mcp.oauth`: how it is reached;
* :mod:`~gateway.mcp.accounting`: a span, metrics and a recent-calls entry per call.
"""
