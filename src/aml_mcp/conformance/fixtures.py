"""Tools, prompts and resources named in shared/conformance/FIXTURES.md (sections 1-12)."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

from aml_mcp.catalog import (
    Catalog,
    Contents,
    Execution,
    InputRequest,
    InvocationContext,
    PromptRegistry,
    PromptSpec,
    ResourceRegistry,
    ResourceSpec,
    ResourceTemplateSpec,
    ToolRegistry,
    ToolSpec,
    client_supports,
    elicit_form,
    list_roots,
    missing_capability,
    request_input,
    sample,
)
from aml_mcp.conformance.media import png_1x1, wav_silence

NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


def text(value: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=value)], is_error=is_error)


def accepted_content(answer: Any) -> dict[str, Any]:
    """The form content of an accepted elicitation, or `{}` for a decline or cancel."""
    if (
        isinstance(answer, dict)
        and answer.get("action") == "accept"
        and isinstance(answer.get("content"), dict)
    ):
        return dict(answer["content"])
    return {}


def sampled_text(answer: Any) -> str:
    content = answer.get("content") if isinstance(answer, dict) else None
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return str(content["text"])
    return ""


def _tool(name: str, description: str, body: Any, schema: dict[str, Any] | None = None) -> ToolSpec:
    return ToolSpec(name=name, description=description, input_schema=schema or NO_ARGUMENTS, body=body)


def _content_tools() -> list[ToolSpec]:
    png, wav = png_1x1(), wav_silence()

    async def simple_text(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return text("This is a simple text response for testing.")

    async def image(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return types.CallToolResult(content=[types.ImageContent(data=png, mime_type="image/png")])

    async def audio(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return types.CallToolResult(content=[types.AudioContent(data=wav, mime_type="audio/wav")])

    async def embedded(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        resource = types.TextResourceContents(
            uri="test://embedded-resource",
            mime_type="text/plain",
            text="This is an embedded resource content.",
        )
        return types.CallToolResult(content=[types.EmbeddedResource(resource=resource)])

    async def mixed(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        resource = types.TextResourceContents(
            uri="test://mixed-content-resource",
            mime_type="application/json",
            text='{"test":"data","value":123}',
        )
        return types.CallToolResult(
            content=[
                types.TextContent(text="Multiple content types test:"),
                types.ImageContent(data=png, mime_type="image/png"),
                types.EmbeddedResource(resource=resource),
            ]
        )

    async def error(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return text("This tool intentionally returns an error for testing", is_error=True)

    return [
        _tool("test_simple_text", "Returns a fixed line of text.", simple_text),
        _tool("test_image_content", "Returns a 1x1 PNG image.", image),
        _tool("test_audio_content", "Returns a short WAV clip.", audio),
        _tool("test_embedded_resource", "Returns an embedded text resource.", embedded),
        _tool("test_multiple_content_types", "Returns text, an image and a resource.", mixed),
        _tool("test_error_handling", "Always returns a tool execution error.", error),
    ]


def _behaviour_tools(catalog: Catalog) -> list[ToolSpec]:
    async def progress(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        for step in (0, 50, 100):
            await ctx.report_progress(step, 100, f"{step}%")
            if step < 100:
                await anyio.sleep(0.05)
        return text("Progress complete.")

    async def needs_sampling(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        if ctx.client_capabilities.sampling is None:
            raise missing_capability({"sampling": {}}, "sampling")
        return text("The client declared sampling.")

    async def streaming_elicitation(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        # At this revision a server never sends a request on a response stream; it answers plainly.
        return text("No server-to-client request is sent on this stream.")

    async def logging(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        await ctx.log("info", "test_logging_tool ran")
        return text("Logged (when the request opted in).")

    async def dynamic_tool(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return text("A dynamically registered tool.")

    async def trigger_tool_change(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        catalog.tools.add(_tool("test_dynamic_tool", "Registered by test_trigger_tool_change.", dynamic_tool))
        return text("Tool list changed.")

    async def dynamic_prompt(args: dict[str, str], ctx: InvocationContext) -> types.GetPromptResult:
        return _user_text("A dynamically registered prompt.")

    async def trigger_prompt_change(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        assert catalog.prompts is not None
        catalog.prompts.add(
            PromptSpec(
                name="test_dynamic_prompt", description="Registered by a trigger.", body=dynamic_prompt
            )
        )
        return text("Prompt list changed.")

    async def region(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return text(f"Region: {args.get('region', '(none)')}")

    async def nothing(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return text("This tool only exists to show its input schema.")

    async def greet(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return text(f"Hello, {args['name']}!")

    region_schema = {
        "type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}, "note": {"type": "string"}},
    }
    greet_schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    return [
        _tool("test_tool_with_progress", "Reports progress 0, 50, 100.", progress),
        _tool("test_missing_capability", "Needs the sampling capability.", needs_sampling),
        _tool(
            "test_streaming_elicitation", "Answers without server-to-client requests.", streaming_elicitation
        ),
        _tool("test_logging_tool", "Logs only when the request asked for log messages.", logging),
        _tool("test_trigger_tool_change", "Registers test_dynamic_tool.", trigger_tool_change),
        _tool("test_trigger_prompt_change", "Registers test_dynamic_prompt.", trigger_prompt_change),
        _tool(
            "json_schema_2020_12_tool",
            "Shows a JSON Schema 2020-12 input schema.",
            nothing,
            JSON_SCHEMA_2020_12,
        ),
        _tool(
            "test_x_mcp_header",
            "Mirrors its region argument in the Mcp-Param-Region header.",
            region,
            region_schema,
        ),
        _tool("greet", "Greets by name (never a task).", greet, greet_schema),
    ]


def _round_trip_tools() -> list[ToolSpec]:
    async def elicitation(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        answer = await request_input(ctx, "user_name", elicit_form("What is your name?", NAME_SCHEMA))
        return text(f"Hello, {accepted_content(answer).get('name', 'stranger')}!")

    async def sampling(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        answer = await request_input(ctx, "capital_question", sample("What is the capital of France?", 100))
        return text(f"The model said: {sampled_text(answer)}")

    async def roots(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        answer = await request_input(ctx, "client_roots", list_roots())
        uris = [str(root.get("uri")) for root in answer.get("roots", []) if isinstance(root, dict)]
        return text(f"Client roots: {', '.join(uris) or '(none)'}")

    async def confirm(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        answer = await request_input(ctx, "confirm", elicit_form("Please confirm", schema))
        return text(f"state-ok: confirmed={accepted_content(answer).get('ok')}")

    async def multiple(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        answers = await ctx.request_inputs(
            {
                "user_name": elicit_form("What is your name?", NAME_SCHEMA),
                "greeting": sample("Generate a greeting", 50),
                "client_roots": list_roots(),
            }
        )
        name = accepted_content(answers["user_name"]).get("name", "stranger")
        return text(
            f"{sampled_text(answers['greeting'])} {name} ({len(answers['client_roots']['roots'])} roots)"
        )

    async def multi_round(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        first = await request_input(ctx, "step1", elicit_form("Step 1: What is your name?", NAME_SCHEMA))
        color_schema = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
        second = await request_input(
            ctx, "step2", elicit_form("Step 2: What is your favorite color?", color_schema)
        )
        name = accepted_content(first).get("name", "stranger")
        return text(f"{name} likes {accepted_content(second).get('color', 'no colour')}.")

    async def by_capability(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        options: dict[str, InputRequest] = {
            "user_name": elicit_form("What is your name?", NAME_SCHEMA),
            "capital_question": sample("What is the capital of France?", 100),
            "client_roots": list_roots(),
        }
        usable = {key: req for key, req in options.items() if client_supports(ctx.client_capabilities, req)}
        if not usable:
            return text("The client declared no capability this tool can use.", is_error=True)
        answers = await ctx.request_inputs(usable)
        return text(f"Answered: {', '.join(sorted(answers))}")

    return [
        _tool("test_input_required_result_elicitation", "Asks for a name by elicitation.", elicitation),
        _tool("test_input_required_result_sampling", "Asks the client's model a question.", sampling),
        _tool("test_input_required_result_list_roots", "Asks for the client's roots.", roots),
        _tool("test_input_required_result_request_state", "Asks for confirmation, carrying state.", confirm),
        _tool("test_input_required_result_multiple_inputs", "Asks three things at once.", multiple),
        _tool("test_input_required_result_multi_round", "Asks two things in two rounds.", multi_round),
        _tool("test_input_required_result_tampered_state", "Carries sealed state; tampering fails.", confirm),
        _tool(
            "test_input_required_result_capabilities", "Asks only what the client can answer.", by_capability
        ),
    ]


def _user_text(value: str) -> types.GetPromptResult:
    return types.GetPromptResult(
        messages=[types.PromptMessage(role="user", content=types.TextContent(text=value))]
    )


def _prompts() -> PromptRegistry:
    png = png_1x1()

    async def simple(args: dict[str, str], ctx: InvocationContext) -> types.GetPromptResult:
        return _user_text("This is a simple prompt for testing.")

    async def with_arguments(args: dict[str, str], ctx: InvocationContext) -> types.GetPromptResult:
        return _user_text(f"Prompt with arguments: arg1='{args['arg1']}', arg2='{args['arg2']}'")

    async def with_resource(args: dict[str, str], ctx: InvocationContext) -> types.GetPromptResult:
        resource = types.TextResourceContents(
            uri=args["resourceUri"], mime_type="text/plain", text="Embedded resource content for testing."
        )
        return types.GetPromptResult(
            messages=[
                types.PromptMessage(role="user", content=types.EmbeddedResource(resource=resource)),
                types.PromptMessage(
                    role="user", content=types.TextContent(text="Please process the embedded resource above.")
                ),
            ]
        )

    async def with_image(args: dict[str, str], ctx: InvocationContext) -> types.GetPromptResult:
        return types.GetPromptResult(
            messages=[
                types.PromptMessage(role="user", content=types.ImageContent(data=png, mime_type="image/png")),
                types.PromptMessage(
                    role="user", content=types.TextContent(text="Please analyze the image above.")
                ),
            ]
        )

    async def with_input(args: dict[str, str], ctx: InvocationContext) -> types.GetPromptResult:
        schema = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
        answer = await request_input(
            ctx, "user_context", elicit_form("What context should the prompt use?", schema)
        )
        return _user_text(f"Use this context: {accepted_content(answer).get('context', '')}")

    def arg(name: str, description: str) -> types.PromptArgument:
        return types.PromptArgument(name=name, description=description, required=True)

    return PromptRegistry(
        [
            PromptSpec(name="test_simple_prompt", description="A prompt without arguments.", body=simple),
            PromptSpec(
                name="test_prompt_with_arguments",
                description="A prompt with two required arguments.",
                body=with_arguments,
                arguments=[arg("arg1", "First argument"), arg("arg2", "Second argument")],
                completions={"arg1": ["test", "testValue1", "tested"], "arg2": ["testValue2"]},
            ),
            PromptSpec(
                name="test_prompt_with_embedded_resource",
                description="A prompt embedding a resource.",
                body=with_resource,
                arguments=[arg("resourceUri", "URI of the resource to embed")],
            ),
            PromptSpec(name="test_prompt_with_image", description="A prompt with an image.", body=with_image),
            PromptSpec(
                name="test_input_required_result_prompt",
                description="A prompt that asks the client for context first.",
                body=with_input,
            ),
        ]
    )


def _resources() -> ResourceRegistry:
    png = png_1x1()

    async def static_text(uri: str, variables: dict[str, Any]) -> Contents:
        return [
            types.TextResourceContents(
                uri=uri, mime_type="text/plain", text="This is the content of the static text resource."
            )
        ]

    async def static_binary(uri: str, variables: dict[str, Any]) -> Contents:
        return [types.BlobResourceContents(uri=uri, mime_type="image/png", blob=png)]

    async def templated(uri: str, variables: dict[str, Any]) -> Contents:
        item = str(variables.get("id", ""))
        body = f'{{"id":"{item}","templateTest":true,"data":"Data for ID: {item}"}}'
        return [types.TextResourceContents(uri=uri, mime_type="application/json", text=body)]

    return ResourceRegistry(
        [
            ResourceSpec(
                uri="test://static-text",
                name="static-text",
                description="Fixed text.",
                read=static_text,
                mime_type="text/plain",
            ),
            ResourceSpec(
                uri="test://static-binary",
                name="static-binary",
                description="A PNG image.",
                read=static_binary,
                mime_type="image/png",
            ),
        ],
        [
            ResourceTemplateSpec(
                uri_template="test://template/{id}/data",
                name="template-data",
                description="JSON data for an id.",
                read=templated,
                mime_type="application/json",
            )
        ],
    )


def _task_tools() -> list[ToolSpec]:
    """Section 12: tools that run as tasks (`auto`: a task only when the client declared the extension)."""

    async def slow_compute(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        seconds = float(args["seconds"])
        await anyio.sleep(seconds)
        return text(str(args.get("label") or f"Computed for {seconds:g} s."))

    async def failing_job(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        await anyio.sleep(1)
        return text("The job failed: the input could not be processed.", is_error=True)

    async def protocol_error_job(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        await anyio.sleep(0.2)
        raise MCPError(code=INTERNAL_ERROR, message="Upstream service unavailable")

    confirm_schema = {
        "type": "object",
        "properties": {"confirm": {"type": "boolean"}},
        "required": ["confirm"],
    }

    async def confirm_delete(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        filename = str(args["filename"])
        answer = await request_input(
            ctx, "confirm_delete", elicit_form(f"Delete {filename}?", confirm_schema)
        )
        confirmed = accepted_content(answer).get("confirm") is True
        return text(f"Deleted {filename}." if confirmed else f"Kept {filename}.")

    async def multi_input(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        answers = await ctx.request_inputs(
            {
                "name": elicit_form("What is your name?", NAME_SCHEMA),
                "confirm": elicit_form("Do you confirm?", confirm_schema),
            }
        )
        name = accepted_content(answers["name"]).get("name", "stranger")
        confirmed = accepted_content(answers["confirm"]).get("confirm")
        return text(f"{name} answered; confirmed={confirmed}.")

    async def ask_name(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        answer = await request_input(ctx, "user_name", elicit_form("What is your name?", NAME_SCHEMA))
        return text(f"Hello, {accepted_content(answer).get('name', 'stranger')}!")

    slow_schema = {
        "type": "object",
        "properties": {"seconds": {"type": "number", "minimum": 0}, "label": {"type": "string"}},
        "required": ["seconds"],
    }
    file_schema = {"type": "object", "properties": {"filename": {"type": "string"}}, "required": ["filename"]}
    return [
        ToolSpec(
            name="slow_compute",
            description="Sleeps for `seconds`, then returns its label (a task when the client allows).",
            input_schema=slow_schema,
            body=slow_compute,
            execution=Execution.AUTO,
            idempotent=True,
        ),
        ToolSpec(
            name="failing_job",
            description="Always a task; completes after a second with a tool error (isError).",
            input_schema=NO_ARGUMENTS,
            body=failing_job,
            execution=Execution.TASK,
        ),
        ToolSpec(
            name="protocol_error_job",
            description="Always a task; fails with a JSON-RPC error.",
            input_schema=NO_ARGUMENTS,
            body=protocol_error_job,
            execution=Execution.TASK,
        ),
        ToolSpec(
            name="confirm_delete",
            description="Asks for confirmation before (pretending to) delete a file.",
            input_schema=file_schema,
            body=confirm_delete,
            execution=Execution.AUTO,
        ),
        ToolSpec(
            name="multi_input",
            description="Asks two questions at once while running as a task.",
            input_schema=NO_ARGUMENTS,
            body=multi_input,
            execution=Execution.TASK,
        ),
        ToolSpec(
            name="test_tool_with_task",
            description="Asks for a name by multi round-trip, then greets from a task.",
            input_schema=NO_ARGUMENTS,
            body=ask_name,
            preflight=ask_name,
            execution=Execution.TASK,
        ),
    ]


def fixture_catalog() -> Catalog:
    """A fresh catalog (the trigger tools mutate it, so every server gets its own)."""
    catalog = Catalog(tools=ToolRegistry(), prompts=_prompts(), resources=_resources(), completions=True)
    for tool in [*_content_tools(), *_behaviour_tools(catalog), *_round_trip_tools(), *_task_tools()]:
        catalog.tools.add(tool)
    return catalog
