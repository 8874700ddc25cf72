"""The fault harness itself: a private server that terminates only the connections asked for, stops
and starts again on the same URL, and leaves nothing behind."""

from __future__ import annotations

import psycopg
import pytest

from tests.support.private_postgres import PrivatePostgres

pytestmark = pytest.mark.faults


def test_terminate_all_ends_the_named_connections_and_only_those(private_postgres: PrivatePostgres) -> None:
    ours = psycopg.connect(private_postgres.url, autocommit=True, application_name="aml-mcp-test")
    other = psycopg.connect(private_postgres.url, autocommit=True, application_name="someone-else")
    try:
        assert private_postgres.terminate_all() == 1
        with pytest.raises(psycopg.OperationalError):
            ours.execute("SELECT 1")
        assert other.execute("SELECT 1").fetchone() == (1,)
    finally:
        ours.close()
        other.close()


def test_a_stopped_server_refuses_and_a_started_one_answers_on_the_same_url(
    private_postgres: PrivatePostgres,
) -> None:
    private_postgres.stop()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(private_postgres.url, connect_timeout=2)
    private_postgres.start()
    with psycopg.connect(private_postgres.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    private_postgres.restart()
    assert private_postgres.connections() == []


def test_the_server_and_its_directory_are_gone_on_exit() -> None:
    with PrivatePostgres() as server:
        directory, url = server.directory, server.url
        assert directory is not None and (directory / "data" / "postmaster.pid").exists()
    assert not directory.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)
