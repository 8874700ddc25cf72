"""The PostgreSQL event bus between two real processes: a task runs in one, a stream follows it in
the other, and killing the listener connections mid-burst loses no final state.

Process A is the real `aml-mcp conformance-server` child; process B is this test process serving
the same app with uvicorn on 127.0.0.1. Both share one PostgreSQL schema and nothing else (separate
data dirs), so every notification B's stream gets crossed the database.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.principal import Owner
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.subscriptions.events import Event, TaskChanged
from aml_mcp.subscriptions.followed import FollowedTasks
from aml_mcp.subscriptions.postgres_bus import TASK_CHANNEL, PgEventBus, parse_payload
from tests.support.live_server import LiveServer
from tests.support.mcp_http import TASKS_EXTENSION, create, headers_for, message
from tests.support.postgres import kill_listeners, scratch_database, scratch_schema
from tests.support.settings import open_settings
from tests.support.sse import SseReader, final_states
from tests.support.subprocess_server import ServerProcess

WITH_TASKS = {"extensions": {TASKS_EXTENSION: {}}}


@dataclass
class Pair:
    url: str
    schema: str
    a: httpx.Client
    """Process A (the child): where tasks are created and run."""
    b: httpx.Client
    """Process B (this process): where streams are held."""


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with scratch_schema() as (url, schema):
        env = {"AML_MCP_DATABASE_URL": url, "AML_MCP_DATABASE_SCHEMA": schema}
        data_a: Path = tmp_path_factory.mktemp("process-a")
        settings_b = open_settings(
            tmp_path_factory.mktemp("process-b"), database_url=url, database_schema=schema
        )
        with (
            ServerProcess(["conformance-server", "--data-dir", str(data_a)], env=env) as child,
            LiveServer(build_app(settings_b, catalog=fixture_catalog())) as live,
            httpx.Client(base_url=child.url, timeout=10) as a,
            httpx.Client(base_url=live.url, timeout=httpx.Timeout(10, read=30)) as b,
        ):
            yield Pair(url, schema, a, b)


@contextmanager
def listening(client: httpx.Client, task_ids: list[str]) -> Iterator[SseReader]:
    body = message("subscriptions/listen", {"notifications": {"taskIds": task_ids}}, capabilities=WITH_TASKS)
    with client.stream("POST", "/mcp", content=json.dumps(body), headers=headers_for(body)) as response:
        assert response.status_code == 200, response.read()
        yield SseReader(response)


def test_a_change_committed_in_one_process_reaches_a_stream_in_another(pair: Pair) -> None:
    task = create(pair.a, "slow_compute", {"seconds": 0.5, "label": "x"})
    with listening(pair.b, [task["taskId"]]) as stream:
        ack = stream.next()
        assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged"
        first = stream.next()
        assert first is not None and first["params"]["status"] == "working"  # current state first
        final = stream.next(timeout=10)
        assert final is not None and final["method"] == "notifications/tasks"
        assert final["params"]["taskId"] == task["taskId"] and final["params"]["status"] == "completed"


def test_killing_the_listeners_during_a_burst_loses_no_final_state(pair: Pair) -> None:
    seconds = [0.2 + 0.05 * i for i in range(40)]  # completions spread over about 2 seconds
    task_ids = [create(pair.a, "slow_compute", {"seconds": s, "label": str(s)})["taskId"] for s in seconds]
    with listening(pair.b, task_ids) as stream:
        ack = stream.next()
        assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged"
        killed: list[int] = []
        killer = threading.Thread(target=kill_listeners, args=(pair.url, pair.schema, 6, 0.35, killed))
        killer.start()
        try:
            states = final_states(stream, task_ids, timeout=30)
        finally:
            killer.join()
    assert sum(1 for count in killed if count >= 2) >= 3, f"listeners were not killed: {killed}"
    assert {task_id: states.get(task_id) for task_id in task_ids} == dict.fromkeys(task_ids, "completed")


@pytest.mark.parametrize(
    ("payload", "parsed"),
    [
        ('{"id":"t1","v":2,"o":["i","s","t","c"]}', ("t1", Owner("i", "s", "t", "c"))),
        ('{"id":"t1","v":2}', None),  # no owner: nothing to look it up by
        ('{"id":"t1","v":2,"o":["i","s","t"]}', None),
        ('{"id":1,"v":2,"o":["i","s","t","c"]}', None),
        ("not json", None),
        ("[]", None),
    ],
)
def test_a_notification_is_read_strictly(payload: str, parsed: Any) -> None:
    assert parse_payload(payload) == parsed


async def _notify(database: PostgresDatabase, payload: str, *, channel: str | None = None) -> None:
    async with await psycopg.AsyncConnection.connect(database.url, autocommit=True) as conn:
        await conn.execute("SELECT pg_notify(%s, %s)", (channel or database.channel(TASK_CHANNEL), payload))


@pytest.mark.anyio
async def test_the_bus_looks_up_only_followed_tasks_and_resyncs_after_a_reconnect() -> None:
    who = Owner("i", "s", "t", "c")
    looked_up: list[tuple[str, Owner]] = []
    delivered: list[Event] = []
    arrived, resynced = anyio.Event(), anyio.Event()

    def deliver(event: Event) -> None:
        delivered.append(event)
        arrived.set()

    async def resolve(task_id: str, owner: Owner) -> Event | None:
        looked_up.append((task_id, owner))
        return TaskChanged(owner, task_id, None, {"taskId": task_id}, 2)

    async def resync() -> None:
        if bus.connects >= 2:
            resynced.set()

    followed = FollowedTasks()
    followed.follow(["followed"])
    async with scratch_database() as database:
        bus = PgEventBus(database, resolve=resolve, followed=followed, liveness_seconds=0.2)
        bus.subscribe(deliver)
        bus.on_resync(resync)
        async with bus.running():
            assert bus.connects == 1 and bus.resyncs == 1
            # Another deployment's channel (another schema of the database) never reaches this one.
            other = '{"id":"followed","v":9,"o":["i","s","t","c"]}'
            await _notify(database, other, channel=TASK_CHANNEL)
            for task_id in ("elsewhere", "followed"):
                await _notify(database, f'{{"id":"{task_id}","v":2,"o":["i","s","t","c"]}}')
            with anyio.fail_after(5):
                await arrived.wait()
            await anyio.sleep(0.2)
            assert looked_up == [("followed", who)]
            assert len(delivered) == 1
            pid = bus.backend_pid
            assert pid is not None
            async with await psycopg.AsyncConnection.connect(database.url, autocommit=True) as admin:
                await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            with anyio.fail_after(10):
                await resynced.wait()
            assert bus.connects == 2 and bus.backend_pid not in (None, pid)


@pytest.mark.anyio
async def test_notifications_dropped_by_a_full_backlog_are_made_up_by_a_resync() -> None:
    release, resynced = anyio.Event(), anyio.Event()
    rounds: list[int] = []

    async def slow_resolve(task_id: str, owner: Owner) -> Event | None:
        await release.wait()  # lookups stall: the backlog fills up
        return None

    async def resync() -> None:
        rounds.append(bus.connects)
        if len(rounds) >= 2:
            resynced.set()

    async with scratch_database() as database:
        bus = PgEventBus(database, resolve=slow_resolve, liveness_seconds=0.1, lookups_at_once=1, backlog=2)
        bus.subscribe(lambda event: None)
        bus.on_resync(resync)
        async with bus.running():
            for n in range(10):
                await _notify(database, f'{{"id":"t{n}","v":2,"o":["i","s","t","c"]}}')
            await anyio.sleep(0.5)
            assert rounds == [1], "no resync while the backlog is still full"
            release.set()
            with anyio.fail_after(5):
                await resynced.wait()
    assert rounds == [1, 1]  # the second round came without any reconnect
