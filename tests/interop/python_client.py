"""Connecting the official Python SDK (`mcp` 2.3.0) to aml-mcp with a bearer token. The lines
between the docs markers are the snippet in docs/connecting-clients.md, "Connect a client" (a test
checks that they match, and runs `search`)."""

# docs:python
from httpx2 import AsyncClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def search(url: str, token: str, query: str) -> str:
    http = AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
        print([tool.name for tool in (await client.list_tools()).tools])
        return (await client.call_tool("search_aml_notes", {"query": query})).content[0].text


# docs:end
