"""An ASGI app served in this process, without sockets, for tests that exchange plain HTTP requests.

`InProcessServer(app)` runs the app's lifespan (startup, background work, shutdown) on an event
loop of its own, in a background thread, the way uvicorn would; `client()` gives an `httpx.Client`
whose requests are handed to that loop whole, through `httpx.ASGITransport`, and whose responses
come back whole. No HTTP parser, no port, no TCP round trip: a request costs what the app spends on
it. What needs a real socket — SSE and listen streams, raw header bytes, body framing, signals,
other processes, real-client interop — uses `LiveServer` or `ServerProcess` instead.

Typical use::

    with InProcessServer(build_app(settings)) as server, server.client() as http:
        assert http.get("/healthz").status_code == 200
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx
from asgi_lifespan import LifespanManager
from starlette.types import ASGIApp

T = TypeVar("T")

DEFAULT_PORT = 8000
"""The port in `url` (never bound): what the app is told it serves on, e.g. in its resource URL."""


class _LoopTransport(httpx.BaseTransport):
    """A synchronous httpx transport that runs each exchange on the server's event loop."""

    def __init__(self, app: ASGIApp, loop: asyncio.AbstractEventLoop) -> None:
        self._asgi = httpx.ASGITransport(app, client=("127.0.0.1", 50_000))
        self._loop = loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()  # a bytes stream, which the async transport can send as well
        timeout = request.extensions.get("timeout", {}).get("read")
        future = asyncio.run_coroutine_threadsafe(self._exchange(request), self._loop)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise httpx.ReadTimeout("no response from the in-process app in time", request=request) from None

    async def _exchange(self, request: httpx.Request) -> httpx.Response:
        response = await self._asgi.handle_async_request(request)
        body = b"".join([chunk async for chunk in response.stream])  # type: ignore[union-attr]
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx.ByteStream(body),
            extensions=response.extensions,
        )


class InProcessServer:
    """Serves `app` in this process with lifespan on; use as a context manager.

    `url` is the base URL clients use (no socket is bound: `port` only names the app's own address).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        port: int = DEFAULT_PORT,
        startup_timeout: float = 15.0,
        shutdown_timeout: float = 30.0,
    ) -> None:
        self.app = app
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="in-process-app", daemon=True)
        self._stop: asyncio.Event | None = None
        self._serving: concurrent.futures.Future[None] | None = None
        self._app = app
        self.transport = _LoopTransport(app, self._loop)

    async def _serve(self, started: threading.Event) -> None:
        self._stop = asyncio.Event()
        async with LifespanManager(
            self.app, startup_timeout=self.startup_timeout, shutdown_timeout=self.shutdown_timeout
        ) as manager:
            self._app = manager.app
            self.transport = _LoopTransport(manager.app, self._loop)
            started.set()
            await self._stop.wait()

    def run(self, fn: Callable[[], Awaitable[T]], *, timeout: float = 120.0) -> T:
        """`await fn()` on the app's own event loop (with `exchange` inside, for many requests at once)."""
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(timeout)

    async def exchange(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, bytes]:
        """One request straight into the app, without an HTTP client: its status and body.

        To be awaited on the app's loop (see `run`): the lean path for tests that send thousands of
        requests, where building them with httpx would cost more than the app spends answering.
        """
        raw_headers = [(name.lower().encode(), value.encode()) for name, value in headers.items()]
        raw_headers += [
            (b"host", f"127.0.0.1:{self.port}".encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": raw_headers,
            "client": ("127.0.0.1", 50_000),
            "server": ("127.0.0.1", self.port),
        }
        request_sent = False
        response_done = asyncio.Event()
        status = 0
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal request_sent
            if not request_sent:
                request_sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await response_done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    response_done.set()

        await self._app(scope, receive, send)
        return status, b"".join(chunks)

    def client(self, **kwargs: Any) -> httpx.Client:
        """A new client of this server (its own cookies); `httpx.Client` keywords pass through."""
        kwargs.setdefault("timeout", 15)
        return httpx.Client(transport=self.transport, base_url=self.url, **kwargs)

    def __enter__(self) -> InProcessServer:
        self._thread.start()
        started = threading.Event()
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(started), self._loop)
        self._serving.add_done_callback(lambda _: started.set())
        if not started.wait(self.startup_timeout + 5) or self._serving.done():
            self._serving.result(timeout=0)  # raises what failed the startup
            raise RuntimeError("the in-process app stopped during startup")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._serving is not None and not self._serving.done() and self._stop is not None:
                self._loop.call_soon_threadsafe(self._stop.set)
                self._serving.result(timeout=self.shutdown_timeout + 5)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self._loop.close()
