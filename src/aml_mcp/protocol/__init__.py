"""The MCP protocol layer: the SDK's low-level `Server`, fed from the catalog."""
