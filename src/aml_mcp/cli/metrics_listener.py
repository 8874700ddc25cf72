"""The metrics listener: `/metrics` on a socket of its own, beside the public one, in one process.

Why a listener of its own: behind a balancer on the same machine every request's TCP peer is the
balancer's loopback address, so a "loopback clients only" check on the public port cannot tell the
scraper from the internet. A port the balancer never forwards to can: the public app has no
`/metrics` at all, and this listener (loopback by default, off unless `metrics_port` is set) serves
nothing else.

Why in the same process and event loop as the app: the metrics read live values (open listen
streams, the event bus's counters, the shared database's task counts through the app's own pool),
so the metrics app runs on the loop that owns them. It has no lifespan of its own; the app's
lifespan opens and closes what it reads, and the app's server stops this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Generator

import anyio
import uvicorn
from starlette.types import ASGIApp

from aml_mcp.config import Settings
from aml_mcp.http.protocol import uvicorn_options

logger = logging.getLogger(__name__)

STOP_SECONDS = 2
"""How long the metrics listener waits for a scrape in flight once the server stops."""


class MetricsServer(uvicorn.Server):
    """uvicorn for the metrics app; leaves the process's signals to the app's server, which stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    def stop(self) -> None:
        self.should_exit = True


def metrics_server(app: ASGIApp, settings: Settings) -> MetricsServer:
    """A server for `app` (the app's `metrics_app`) bounded like the public one, without access log
    lines (a scrape every few seconds would bury the requests that matter)."""
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level=settings.log_level,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=STOP_SECONDS,
        proxy_headers=False,
        server_header=False,
        **uvicorn_options(settings.http),
    )
    return MetricsServer(config)


async def serve_beside(main: Awaitable[None], metrics: MetricsServer, sock: socket.socket) -> None:
    """Run `metrics` on `sock` for as long as `main` (the app's server) runs, then stop it."""
    async with anyio.create_task_group() as group:
        group.start_soon(serve_metrics, metrics, sock)
        try:
            await main
        finally:
            metrics.stop()


async def serve_metrics(metrics: MetricsServer, sock: socket.socket) -> None:
    """The metrics listener; its failure is logged and never takes the app's server down with it."""
    try:
        await metrics.serve(sockets=[sock])
    except Exception:
        logger.exception("the metrics listener stopped; the server goes on without it")


def run_beside(
    server: uvicorn.Server, sockets: list[socket.socket] | None, metrics: MetricsServer, sock: socket.socket
) -> None:
    """`server.run(sockets)` with the metrics listener beside it, on the same event loop."""
    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        runner.run(serve_beside(server.serve(sockets=sockets), metrics, sock))
