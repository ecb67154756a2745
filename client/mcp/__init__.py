"""deplog inside MCP stacks built with the MCP Python SDK (extra ``deplog[mcp]`` or ``[mcp1]``)."""
