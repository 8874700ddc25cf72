"""`aml-mcp conformance-client URL`: the client the official MCP conformance suite drives.

The suite runs this command once per client scenario with the scenario's server URL as the last
argument, `MCP_CONFORMANCE_SCENARIO` naming the scenario and `MCP_CONFORMANCE_CONTEXT` (JSON)
carrying what a real deployment would configure: pre-registered client credentials, or the tool
calls to make. It does what an ordinary host does with `aml_mcp.client` — authorize when challenged,
list the tools, call them, answer input requests, read a resource and get a prompt when offered —
so the suite judges the library, not a scenario-specific script.

The client and the MCP SDK are imported in the functions that use them: building the command line
(`aml-mcp --help`) imports every command module, and must not pay for them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import mcp_types as types

    from aml_mcp.client import McpClient

CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
"""This client's metadata document URL, used as its client id where the server supports that."""

log = logging.getLogger("aml_mcp.conformance_client")


def _context() -> dict[str, Any]:
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    if not raw:
        return {}
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


async def _accept_with_defaults(key: str, request: Mapping[str, Any]) -> Mapping[str, Any]:
    """Answers every input request: an elicitation with its schema's defaults (or an empty form)."""
    method = request.get("method")
    params = request.get("params") or {}
    if method == "elicitation/create":
        properties = (params.get("requestedSchema") or {}).get("properties") or {}
        content = {name: spec["default"] for name, spec in properties.items() if "default" in spec}
        return {"action": "accept", "content": content}
    if method == "roots/list":
        return {"roots": []}
    if method == "sampling/createMessage":
        return {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "conformance"}
    return {}


def example_value(schema: Mapping[str, Any]) -> Any:
    """A value of the schema's type: its default, first enum value, or a plain example."""
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    return {
        "number": 1,
        "integer": 1,
        "boolean": True,
        "array": [],
        "object": {},
        "null": None,
    }.get(str(kind), "example")


def example_arguments(tool: types.Tool) -> dict[str, Any]:
    """Arguments for a tool from its input schema: every required property, by example."""
    schema = tool.input_schema or {}
    properties = schema.get("properties") or {}
    required = schema.get("required") or list(properties)
    return {name: example_value(properties.get(name) or {}) for name in required}


def _auth(url: str, scenario: str, context: Mapping[str, Any]) -> Any:
    from mcp.shared.auth import OAuthClientInformationFull
    from pydantic import AnyUrl

    from aml_mcp.client import BearerAuth
    from aml_mcp.client.oauth import FollowRedirects, MemoryTokenStorage, oauth_provider

    if "access_token" in context:
        return BearerAuth(str(context["access_token"]))
    if not scenario.startswith("auth/"):
        return None
    catcher = FollowRedirects()
    registered = None
    if context.get("client_id"):
        secret = context.get("client_secret")
        registered = OAuthClientInformationFull(
            client_id=str(context["client_id"]),
            client_secret=str(secret) if secret else None,
            redirect_uris=[AnyUrl(catcher.redirect_uri)],
            token_endpoint_auth_method="client_secret_basic" if secret else "none",
            issuer=context.get("issuer"),
        )
    storage = MemoryTokenStorage(registered)
    return oauth_provider(
        url,
        storage=storage,
        catcher=catcher,
        client_name="aml-mcp conformance client",
        client_metadata_url=CLIENT_METADATA_URL,
    )


async def _call(client: McpClient, name: str, arguments: dict[str, Any]) -> None:
    from mcp.shared.exceptions import MCPError

    from aml_mcp.client import TaskHandle

    try:
        outcome = await client.call_tool(name, arguments)
        if isinstance(outcome, TaskHandle):
            outcome = await outcome.result()
        log.info("%s → %s", name, outcome.model_dump(by_alias=True, exclude_none=True))
    except MCPError as error:
        log.warning("%s failed: %s", name, error)


async def run_scenario(url: str, scenario: str, context: Mapping[str, Any]) -> None:
    import anyio
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    from aml_mcp.client import McpClient

    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "")
    mode = version if version in MODERN_PROTOCOL_VERSIONS else "auto"
    async with McpClient(
        url, auth=_auth(url, scenario, context), on_input=_accept_with_defaults, mode=mode
    ) as client:
        capabilities = client.server_capabilities
        tools = await client.list_tools()
        planned = context.get("toolCalls")
        if isinstance(planned, list):
            calls = [(str(c["name"]), dict(c.get("arguments") or {})) for c in planned]
        else:
            calls = [(tool.name, example_arguments(tool)) for tool in tools]
        async with anyio.create_task_group() as group:
            for name, arguments in calls:
                group.start_soon(_call, client, name, arguments)
        if capabilities.resources is not None:
            listed = await client.sdk.list_resources()
            for resource in listed.resources[:1]:
                await client.sdk.read_resource(str(resource.uri))
        if capabilities.prompts is not None:
            prompts = await client.sdk.list_prompts()
            for prompt in prompts.prompts[:1]:
                arguments = {a.name: "example" for a in prompt.arguments or [] if a.required}
                await client.sdk.get_prompt(prompt.name, arguments)


def _conformance_client(args: argparse.Namespace) -> int:
    import anyio

    logging.getLogger().setLevel(logging.INFO)
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    try:
        anyio.run(run_scenario, args.url, scenario, _context())
    except Exception as exc:
        log.exception("scenario %s failed", scenario)
        print(f"aml-mcp conformance-client: {exc}", file=sys.stderr)
        return 1
    return 0


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "conformance-client",
        help="the MCP client the official conformance suite drives (reads MCP_CONFORMANCE_*)",
    )
    parser.add_argument("url", help="the scenario's MCP endpoint")
    parser.set_defaults(run=_conformance_client)
