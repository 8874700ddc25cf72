"""The simulation on replicas that share one PostgreSQL database (security review 2, N10): whichever
replica a run lands on, its answer carries the audit records of its wrong request, read from the
shared trail — nothing the page needs lives in one replica's memory. Over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.test_routes import CAROL, EXPECTED, simulate
from tests.support.oauth import SecuredServer, secured_server
from tests.support.postgres import scratch_schema
from tests.support.scoped_catalog import scoped_catalog


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecuredServer, SecuredServer]]:
    with scratch_schema() as (url, schema):
        # One public URL, as behind a balancer: one issuer and one audience for both replicas.
        shared = {"database_url": url, "database_schema": schema, "public_url": "http://127.0.0.1:9/mcp"}
        work: Path = tmp_path_factory.mktemp("lab-replicas")
        with (
            secured_server(work / "a", scoped_catalog(), dev=True, real_socket=True, **shared) as a,
            secured_server(work / "b", scoped_catalog(), dev=True, real_socket=True, **shared) as b,
        ):
            yield a, b


def test_every_run_answers_its_records_whichever_replica_it_lands_on(
    replicas: tuple[SecuredServer, SecuredServer],
) -> None:
    first, second = replicas
    carol = first.dev_token(**CAROL).token  # signed with the key every replica shares
    for case, (status, reason) in EXPECTED.items():
        for replica in (first, second):
            answer = simulate(replica, carol, {"case": case, "tool": "probe_read"})
            assert answer.status_code == 200, answer.text
            outcome = answer.json()
            assert outcome["status"] == status
            refusals = [event["reason"] for event in outcome["audit"] if event["decision"] == "deny"]
            assert refusals == [reason], (case, replica.url, outcome["audit"])
