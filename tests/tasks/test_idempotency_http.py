"""Safe retries of creates over real HTTP: the idempotency key in `tools/call`'s `_meta`.

- The same key sent 3 times across two replicas sharing one PostgreSQL schema (each its own app,
  data directory and socket) creates one task: every answer names it, and the table holds one row.
- A repeat is answered with the task in its current state, finished or not; a key reused for other
  arguments or another tool is refused (-32602) and stores nothing; a key names a task of one owner
  only (real tokens, two callers, one key).
- A malformed key is refused (-32602) for every tool, sync or task; a sync tool takes a good key and
  simply runs, each time.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.protocol.idempotency import IDEMPOTENCY_KEY_META, MAX_KEY_LENGTH
from aml_mcp.tasks.service import KEY_REUSED
from aml_mcp.tasks.storage import MAX_KEY_CHARS
from tests.support.live_server import LiveServer
from tests.support.mcp_http import WITH_TASKS, message, post, wait_for
from tests.support.oauth import TestIssuer, secured_server
from tests.support.postgres import BACKENDS, backend_settings, scratch_schema
from tests.support.settings import open_settings

SLOW = {"seconds": 0.3, "label": "once"}


def keyed(name: str, arguments: dict[str, Any], key: Any) -> dict[str, Any]:
    return message(
        "tools/call",
        {"name": name, "arguments": arguments},
        capabilities=WITH_TASKS,
        **{IDEMPOTENCY_KEY_META: key},
    )


def created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    assert result["resultType"] == "task", result
    return result


def refused(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert "result" not in body, body
    error: dict[str, Any] = body["error"]
    assert error["code"] == -32602, error
    return error


def pg_rows(url: str, schema: str) -> int:
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as conn:
        row = conn.execute("SELECT COUNT(*) FROM tasks").fetchone()
    assert row is not None
    return int(row[0])


def sqlite_rows(data_dir: Path) -> int:
    with contextlib.closing(sqlite3.connect(data_dir / "aml-mcp.db")) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])


@contextlib.contextmanager
def replicas(tmp_path: Path, url: str, schema: str) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Two apps on one schema, each on a real socket of its own."""
    shared = {"database_url": url, "database_schema": schema}
    app_a = build_app(open_settings(tmp_path / "a", **shared), catalog=fixture_catalog())
    app_b = build_app(open_settings(tmp_path / "b", **shared), catalog=fixture_catalog())
    with (
        LiveServer(app_a) as a,
        LiveServer(app_b) as b,
        httpx.Client(base_url=a.url, timeout=15) as http_a,
        httpx.Client(base_url=b.url, timeout=15) as http_b,
    ):
        yield http_a, http_b


def test_the_same_key_sent_three_times_across_replicas_creates_one_task(tmp_path: Path) -> None:
    with scratch_schema() as (url, schema), replicas(tmp_path, url, schema) as (a, b):
        answers = [created(post(http, keyed("slow_compute", SLOW, "retry-1"))) for http in (a, b, a)]
        assert len({answer["taskId"] for answer in answers}) == 1, answers
        assert pg_rows(url, schema) == 1
        # The task runs once and ends once; a repeat after that answers it finished, from either replica.
        task_id = answers[0]["taskId"]
        done = wait_for(b, task_id, "completed", within=15)
        repeat = created(post(b, keyed("slow_compute", SLOW, "retry-1")))
        assert (repeat["taskId"], repeat["status"]) == (task_id, "completed")
        assert done["result"]["content"][0]["text"] == "once"
        # Another key is another create.
        assert created(post(a, keyed("slow_compute", SLOW, "retry-2")))["taskId"] != task_id
        assert pg_rows(url, schema) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_key_reused_for_other_arguments_or_another_tool_is_refused(tmp_path: Path, backend: str) -> None:
    with backend_settings(backend) as shared:
        app = build_app(open_settings(tmp_path, **shared), catalog=fixture_catalog())
        with LiveServer(app) as live, httpx.Client(base_url=live.url, timeout=15) as http:
            first = created(post(http, keyed("slow_compute", SLOW, "k")))
            for name, arguments in (
                ("slow_compute", {**SLOW, "label": "twice"}),
                ("slow_compute", {"seconds": 0.3}),
                ("failing_job", {}),
            ):
                error = refused(post(http, keyed(name, arguments, "k")))
                assert error["message"] == KEY_REUSED
            again = created(post(http, keyed("slow_compute", dict(reversed(SLOW.items())), "k")))
            assert again["taskId"] == first["taskId"]  # the same arguments, in another order
            if backend == "sqlite":
                assert sqlite_rows(tmp_path) == 1
            else:
                assert pg_rows(shared["database_url"], shared["database_schema"]) == 1


@pytest.mark.parametrize(
    "key", [5, None, "", "x" * 256, "spaced key", "caf\u00e9", "tab\tkey", "nul\x00", ["k"], {"k": 1}]
)
def test_a_malformed_key_is_refused_for_every_tool(tmp_path: Path, key: Any) -> None:
    app = build_app(open_settings(tmp_path), catalog=fixture_catalog())
    with LiveServer(app) as live, httpx.Client(base_url=live.url, timeout=15) as http:
        for name, arguments in (("slow_compute", SLOW), ("test_simple_text", {})):
            error = refused(post(http, keyed(name, arguments, key)))
            assert IDEMPOTENCY_KEY_META in error["message"], error
        assert sqlite_rows(tmp_path) == 0


def test_a_sync_tool_takes_a_key_and_simply_runs_each_time(tmp_path: Path) -> None:
    app = build_app(open_settings(tmp_path), catalog=fixture_catalog())
    longest = "~" * 255
    with LiveServer(app) as live, httpx.Client(base_url=live.url, timeout=15) as http:
        for _ in range(2):
            response = post(http, keyed("test_simple_text", {}, longest))
            assert response.status_code == 200, response.text
            assert response.json()["result"]["content"][0]["type"] == "text"
        assert sqlite_rows(tmp_path) == 0


def test_a_key_names_a_task_of_one_owner_only(tmp_path: Path) -> None:
    with (
        TestIssuer() as issuer,
        secured_server(tmp_path, fixture_catalog(), issuer=issuer, real_socket=True) as server,
    ):
        callers = [
            server.mint(subject=subject, tenant=tenant, client_id="c1", scope="")
            for subject, tenant in (("alice", "bank-a"), ("bob", "bank-a"), ("alice", "bank-b"))
        ]
        ids = [
            created(post(server.http, keyed("slow_compute", SLOW, "shared"), token=t))["taskId"]
            for t in callers
        ]
        assert len(set(ids)) == 3
        again = [
            created(post(server.http, keyed("slow_compute", SLOW, "shared"), token=t))["taskId"]
            for t in callers
        ]
        assert again == ids
        assert sqlite_rows(server.data_dir) == 3


def test_the_store_keeps_every_key_the_protocol_accepts() -> None:
    assert MAX_KEY_LENGTH == MAX_KEY_CHARS
