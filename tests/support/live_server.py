"""A real uvicorn server on 127.0.0.1 (random port) in a background thread, for tests over real HTTP."""

from __future__ import annotations

import asyncio
import socket
import threading
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from aml_mcp.cli.metrics_listener import MetricsServer, serve_beside
from tests.support.waiting import eventually


class LiveServer:
    """Serves `app` on 127.0.0.1 with lifespan on; use as a context manager.

    `url` is the base URL (no path). The server stops (graceful, lifespan shutdown) on exit.

    `beside` (the app's metrics app) is served on a second socket, `beside_url`, on the same event
    loop, as `aml-mcp serve` serves its metrics listener: it reads what the app's loop owns (the
    database pool among them), which a second loop in another thread must never touch.
    """

    def __init__(self, app: ASGIApp, *, beside: ASGIApp | None = None, startup_timeout: float = 15.0) -> None:
        self.app = app
        self.startup_timeout = startup_timeout
        self._sock = _listening_socket()
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self._beside: tuple[MetricsServer, socket.socket] | None = None
        self.beside_url: str | None = None
        if beside is not None:
            beside_sock = _listening_socket()
            self.beside_url = f"http://127.0.0.1:{beside_sock.getsockname()[1]}"
            beside_config = uvicorn.Config(beside, log_level="warning", lifespan="off", access_log=False)
            self._beside = (MetricsServer(beside_config), beside_sock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        main = self.server.serve(sockets=[self._sock])
        if self._beside is None:
            await main
        else:
            await serve_beside(main, *self._beside)

    def __enter__(self) -> LiveServer:
        self._thread.start()

        def started() -> bool:
            if not self._thread.is_alive():
                raise RuntimeError("test server failed to start")
            return bool(self.server.started)

        eventually(started, timeout=self.startup_timeout, interval=0.005, what="the test server to start")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        runtime = getattr(getattr(self.app, "state", None), "runtime", None)
        if runtime is not None and self._loop is not None:
            # What `aml-mcp serve` does on SIGTERM: end open streams before waiting for connections.
            self._loop.call_soon_threadsafe(runtime.begin_shutdown)
        self.server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()
        if self._beside is not None:
            self._beside[1].close()


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit this: without it every keep-alive response waits ~40 ms for the
    # client's delayed ACK (Nagle), which made each request over a LiveServer take ~45 ms.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    return sock
