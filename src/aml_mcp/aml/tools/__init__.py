"""The MCP face of the AML domain: the three tools, their scopes, and the service their bodies call.

Everything else under `aml/` is plain domain code that knows nothing of MCP requests.
"""

from aml_mcp.aml.tools.catalog import aml_catalog

__all__ = ["aml_catalog"]
