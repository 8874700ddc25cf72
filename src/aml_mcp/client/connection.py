"""`McpClient`: the SDK's `Client` over Streamable HTTP with the Tasks extension, bearer or OAuth
authentication, multi round-trip inputs, and trace context.

Everything on the wire is the SDK's: discovery, per-request `_meta`, routing headers, result
validation, the listen stream's framing. What this adds is the part the SDK lacks for the Tasks
extension — a `tools/call` may answer with a task, which `call_tool` returns as a `TaskHandle` — and
a single place where the caller's answers to `input_required` come from (`on_input`), whether the
server asks inside a plain call (a retried `tools/call`) or inside a task (`tasks/update`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, contextmanager
from functools import partial
from types import TracebackType
from typing import Any, Final, TypeVar, cast

import httpx2
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.client import Client
from mcp.client.extension import ClaimContext
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

from aml_mcp.client.answer_limit import DEFAULT_MAX_ANSWER_BYTES, AnswerLimit
from aml_mcp.client.errors import InputUnavailable, WrongTask
from aml_mcp.client.events import TaskEvents
from aml_mcp.client.extension import TasksExtension
from aml_mcp.client.handle import InputHandler, TaskHandle
from aml_mcp.client.result_type import default_result_type
from aml_mcp.client.retries import DEFAULT_ATTEMPTS, IDEMPOTENCY_KEY_META, CreateRetries, new_idempotency_key
from aml_mcp.client.task_listen import TaskListen, listen_for_tasks
from aml_mcp.client.task_shapes import (
    TASKS_EXTENSION,
    Acknowledgement,
    CancelTaskRequest,
    CreateTaskResult,
    GetTaskRequest,
    GetTaskResult,
    TaskIdParams,
    TaskState,
    UpdateTaskParams,
    UpdateTaskRequest,
)
from aml_mcp.client.tracing import TRACEPARENT_META_KEY, new_traceparent

MAX_INPUT_ROUNDS: Final = 10
"""Most `input_required` rounds one plain call may take before the client gives up."""
_T = TypeVar("_T")
_INPUT_RESPONSES: TypeAdapter[types.InputResponses] = TypeAdapter(types.InputResponses)


class McpClient:
    """A client of one MCP server (any server speaking 2026-07-28; earlier ones through the SDK's
    fallback, without tasks).

        async with McpClient(url, auth=BearerAuth(token)) as client:
            outcome = await client.call_tool("run_full_eval", {})
            result = outcome if isinstance(outcome, CallToolResult) else await outcome.result()

    `auth` is any `httpx2.Auth`: `BearerAuth`, or the SDK's `OAuthClientProvider` (see
    `aml_mcp.client.oauth`). `on_input` answers the server's input requests; without it a request
    for input raises `InputUnavailable` (plain calls) or leaves the task waiting for `answer()`.

    The server is not trusted with this process's memory or with which task it reports on: no
    answer is read past `max_answer_bytes` (a JSON body, or one event of a stream; also through a
    caller's own `http_client`, which is hooked for the connection's lifetime), and an answer about
    another task than the one asked for is refused. Either raises an `AnswerRefused`.
    """

    def __init__(
        self,
        url: str,
        *,
        auth: httpx2.Auth | None = None,
        on_input: InputHandler | None = None,
        listen: bool = True,
        client_info: types.Implementation | None = None,
        read_timeout_seconds: float | None = None,
        http_client: httpx2.AsyncClient | None = None,
        mode: str = "auto",
        tasks: bool = True,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        create_attempts: int = DEFAULT_ATTEMPTS,
    ) -> None:
        self.url = url
        self.on_input = on_input
        self.listen = listen
        self._auth = auth
        self._http_client = http_client
        self._events = TaskEvents()
        self._stack: AsyncExitStack | None = None
        self._client_info = client_info or types.Implementation(name="aml-mcp-client", version="1")
        self._read_timeout_seconds = read_timeout_seconds
        self._sdk: Client | None = None
        self._mode = mode
        self._tasks = tasks
        """Declare the Tasks extension (`False`: a client that takes only plain results)."""
        self._limit = AnswerLimit(max_answer_bytes)
        """The SDK's `mode`: `auto` discovers (falling back to the legacy handshake); a protocol version
        (`2026-07-28`) adopts it without a discovery round trip."""
        if create_attempts < 1:
            raise ValueError("create_attempts must be at least 1 (the first send)")
        self._create_attempts = create_attempts
        """Sends of one `tools/call` at most, on connection errors, 502 and 503 (1: never resent)."""

    async def __aenter__(self) -> McpClient:
        async with AsyncExitStack() as stack:
            http = self._http_client
            if http is None:
                http = await stack.enter_async_context(self._new_http_client())
            self._limit.install(http)
            stack.callback(self._limit.uninstall, http)
            transport = streamable_http_client(
                self.url, http_client=http, max_sse_event_size=self._limit.max_bytes
            )
            extensions = [TasksExtension(self._events, self._resolve_for_sdk)] if self._tasks else []
            with self._answers_checked():
                self._sdk = await stack.enter_async_context(
                    Client(
                        default_result_type(transport),
                        extensions=extensions,
                        elicitation_callback=self._elicit,
                        client_info=self._client_info,
                        read_timeout_seconds=self._read_timeout_seconds,
                        mode=self._mode,
                    )
                )
            self._stack = stack.pop_all()
        return self

    def _new_http_client(self) -> httpx2.AsyncClient:
        """The SDK's own HTTP client settings (`create_mcp_http_client`), with keyed creates resent on
        connection errors, 502 and 503 (`CreateRetries`)."""
        return httpx2.AsyncClient(
            timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
            auth=self._auth,
            transport=CreateRetries(httpx2.AsyncHTTPTransport(), attempts=self._create_attempts),
        )

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack, self._sdk = self._stack, None, None
        if stack is None:
            return
        try:
            await stack.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The SDK's transport task groups wrap the caller's own exception; let the caller see it
            # as it was raised (an `MCPError`, a `TaskFailed`) rather than a group of one.
            if exc is None or any(leaf is not exc for leaf in _leaves(group)):
                raise

    @property
    def sdk(self) -> Client:
        """The SDK client underneath, for everything else (prompts, resources, listen, ...)."""
        if self._sdk is None:
            raise RuntimeError("use McpClient inside `async with`")
        return self._sdk

    @property
    def server_capabilities(self) -> types.ServerCapabilities:
        return self.sdk.server_capabilities

    @property
    def server_supports_tasks(self) -> bool:
        extensions = self.server_capabilities.extensions or {}
        return TASKS_EXTENSION in extensions

    @property
    def can_listen(self) -> bool:
        """Listening for task states needs a 2026-07-28 connection to a server declaring the extension."""
        modern = self.sdk.protocol_version in MODERN_PROTOCOL_VERSIONS
        return self.listen and modern and self.server_supports_tasks

    async def list_tools(self) -> list[types.Tool]:
        """Every tool, all pages."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            with self._answers_checked():
                page = await self._version_retried(
                    partial(self.sdk.list_tools, cursor=cursor, cache_mode="refresh")
                )
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        traceparent: str | None = None,
        on_input: InputHandler | None = None,
        meta: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> types.CallToolResult | TaskHandle:
        """Call a tool: its result, or a `TaskHandle` when the server runs it as a task.

        A `traceparent` (W3C; a fresh one when omitted) is sent in `_meta`. `input_required` rounds
        are answered with `on_input` (or the client's) and the call retried, as the protocol asks.

        Every call carries an idempotency key in `_meta` (`idempotency_key`, or a fresh random one):
        when a send gets a connection error, a 502 or a 503, it is sent again with the same key, so
        a create whose answer was lost is answered with the task it made, never a second one. Pass
        your own key to make a create safe to repeat across processes (a script run twice).
        """
        answer = on_input or self.on_input
        request_meta: dict[str, Any] = {
            TRACEPARENT_META_KEY: traceparent or new_traceparent(),
            **(meta or {}),
        }
        if idempotency_key is not None or IDEMPOTENCY_KEY_META not in request_meta:
            request_meta[IDEMPOTENCY_KEY_META] = idempotency_key or new_idempotency_key()
        args = dict(arguments or {})
        responses: types.InputResponses | None = None
        state: str | None = None
        for _ in range(MAX_INPUT_ROUNDS):
            result = await self._send_call(name, args, responses, state, request_meta)
            if isinstance(result, CreateTaskResult):
                return TaskHandle(self, result.state(), on_input=answer, listen=self.listen)
            if isinstance(result, types.CallToolResult):
                return result
            if not isinstance(result, types.InputRequiredResult):
                raise MCPError(
                    types.INTERNAL_ERROR, f"unexpected result to tools/call: {type(result).__name__}"
                )
            requests = {
                key: request.model_dump(by_alias=True, mode="json", exclude_none=True)
                for key, request in (result.input_requests or {}).items()
            }
            if answer is None:
                raise InputUnavailable(requests)
            answers = {key: dict(await answer(key, request)) for key, request in requests.items()}
            responses = _INPUT_RESPONSES.validate_python(answers)
            state = result.request_state
        raise MCPError(types.INTERNAL_ERROR, f"{name}: more than {MAX_INPUT_ROUNDS} rounds of input_required")

    async def _send_call(
        self,
        name: str,
        arguments: dict[str, Any],
        responses: types.InputResponses | None,
        state: str | None,
        meta: dict[str, Any],
    ) -> types.CallToolResult | types.InputRequiredResult | types.Result:
        async def send() -> types.CallToolResult | types.InputRequiredResult | types.Result:
            result: (
                types.CallToolResult | types.InputRequiredResult | types.Result
            ) = await self.sdk.session.call_tool(
                name,
                arguments,
                input_responses=responses,
                request_state=state,
                meta=cast(types.RequestParamsMeta, dict(meta)),
                allow_input_required=True,
                allow_claimed=True,
            )
            return result

        try:
            with self._answers_checked():
                return await self._version_retried(send)
        except MCPError as error:
            if error.code != types.HEADER_MISMATCH:
                raise
            # The listed schema (and its `Mcp-Param-*` headers) is missing or stale: re-list, resend once.
            await self.list_tools()
            with self._answers_checked():
                return await send()

    @contextmanager
    def _answers_checked(self) -> Iterator[None]:
        """Raise an answer the limit refused as itself (`AnswerTooLarge`, ...): the SDK reports it to
        the request as a JSON-RPC parse error, which would say nothing of why."""
        before = self._limit.refusals
        try:
            yield
        except MCPError as error:
            refusal = self._limit.refusal_since(before)
            if error.code == types.PARSE_ERROR and refusal is not None:
                raise refusal from error
            raise

    async def _version_retried(self, send: Callable[[], Awaitable[_T]]) -> _T:
        """Send; when the server rejects the protocol version (-32022) naming versions it supports,
        adopt the newest one this client speaks and resend once, as the protocol asks."""
        try:
            return await send()
        except MCPError as error:
            if error.code != UNSUPPORTED_PROTOCOL_VERSION or not isinstance(error.data, dict):
                raise
            supported = [v for v in error.data.get("supported") or [] if v in MODERN_PROTOCOL_VERSIONS]
            if not supported:
                raise
            self.sdk.session.adopt(
                types.DiscoverResult(
                    supported_versions=[max(supported)],
                    capabilities=self.sdk.server_capabilities,
                    result_type="complete",
                    ttl_ms=0,
                    cache_scope="private",
                )
            )
            return await send()

    async def task(self, task_id: str, *, on_input: InputHandler | None = None) -> TaskHandle:
        """A handle on an existing task (e.g. one `aml-mcp call --no-wait` printed), at its current state."""
        state = await self.get_task(task_id)
        return TaskHandle(self, state, on_input=on_input or self.on_input, listen=self.listen)

    async def get_task(self, task_id: str) -> TaskState:
        """`tasks/get`; an answer about another task raises `WrongTask` (nothing of it is kept)."""
        with self._answers_checked():
            result = await self.sdk.session.send_request(
                GetTaskRequest(params=TaskIdParams(task_id=task_id)), GetTaskResult
            )
        if result.task_id != task_id:
            raise WrongTask("tasks/get", task_id)
        return TaskState.model_validate(result.model_dump(by_alias=True, exclude={"result_type"}))

    async def update_task(self, task_id: str, responses: Mapping[str, Any]) -> None:
        with self._answers_checked():
            acknowledged = await self.sdk.session.send_request(
                UpdateTaskRequest(params=UpdateTaskParams(task_id=task_id, input_responses=dict(responses))),
                Acknowledgement,
            )
        _check_acknowledged("tasks/update", task_id, acknowledged)

    async def cancel_task(self, task_id: str) -> None:
        with self._answers_checked():
            acknowledged = await self.sdk.session.send_request(
                CancelTaskRequest(params=TaskIdParams(task_id=task_id)), Acknowledgement
            )
        _check_acknowledged("tasks/cancel", task_id, acknowledged)

    def listen_tasks(self, task_ids: list[str]) -> AbstractAsyncContextManager[TaskListen]:
        return listen_for_tasks(self.sdk.session, task_ids)

    def task_states(self, task_id: str) -> AbstractAsyncContextManager[MemoryObjectReceiveStream[TaskState]]:
        return _as_async(self._events, task_id)

    async def _resolve_for_sdk(self, created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        """For callers of `self.sdk.call_tool`: wait for the task as `TaskHandle.result()` does."""
        del ctx
        return await TaskHandle(self, created.state(), on_input=self.on_input, listen=self.listen).result()

    async def _elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """The SDK's elicitation callback (its presence is what declares the `elicitation` capability)."""
        request = {"method": "elicitation/create", "params": params.model_dump(by_alias=True, mode="json")}
        if self.on_input is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST, message="this client cannot answer input requests"
            )
        answer = await self.on_input(str(context.request_id), request)
        return types.ElicitResult.model_validate(dict(answer))


def _check_acknowledged(method: str, task_id: str, acknowledged: Acknowledgement) -> None:
    """An acknowledgement is empty; one that names a task must name the one asked about."""
    named = (acknowledged.model_extra or {}).get("taskId")
    if named is not None and named != task_id:
        raise WrongTask(method, task_id)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for inner in group.exceptions:
        leaves.extend(_leaves(inner) if isinstance(inner, BaseExceptionGroup) else [inner])
    return leaves


@asynccontextmanager
async def _as_async(events: TaskEvents, task_id: str) -> AsyncIterator[MemoryObjectReceiveStream[TaskState]]:
    with events.waiting(task_id) as states:
        yield states
