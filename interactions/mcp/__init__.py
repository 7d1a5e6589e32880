"""The MCP tool server at `/mcp`: session-scoped tokens (`tokens`), the tools (`tools`), the
Streamable HTTP server and its ASGI mount (`server`), the token API (`views`) and admin."""
