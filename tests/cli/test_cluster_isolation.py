"""Isolation through the balancer: the AML tools on HAProxy round-robin over three API-only replicas
(`serve --role api`) and two workers, one PostgreSQL schema, tokens from the development issuer.

Every request lands on whichever replica is next, every task body runs on a worker, and still:
- the task isolation matrix holds: each of eight callers (two banks x two analysts x two clients)
  owns a `draft_sar_batch` task waiting for input; every foreign `tasks/get`, `tasks/update` and
  `tasks/cancel` is answered exactly like an unknown id and changes nothing, on every replica;
  each owner then answers and completes its own;
- a listen stream that names a foreign task hears nothing of it, while its own task's states arrive;
- `search_aml_notes` and `run_full_eval` of one bank never show another bank's notes or tasks.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from aml_mcp.cli.cluster import Cluster, running_cluster
from tests.aml.tools.aml_client import NOTES_PER_BANK
from tests.isolation.oracle import Caller as OracleCaller
from tests.isolation.oracle import Oracle
from tests.isolation.seeding import Banks, notes_for, seed_tasks
from tests.subscriptions.test_listen_http import listening
from tests.support.aml_live import case_needing_dob, demo_cases_by_bank
from tests.support.mcp_http import WITH_TASKS, call_tool, create, task_request
from tests.support.postgres import check_reachable, database_url
from tests.support.waiting import eventually

pytestmark = [pytest.mark.scaleout, pytest.mark.slow]

BANKS = (TENANTS[0].name, TENANTS[1].name)
ANALYSTS = ("carol", "dave")
CLIENTS = ("copilot", "notebook")
ALL_SCOPES = "aml:read aml:eval aml:draft"
AML_ENV = {
    # A small demo corpus embedded with the static table: the test is about isolation, and three
    # replicas re-embedding with the transformer would take the machine's two cores for minutes.
    "AML_MCP_AML__DEMO_NOTES_PER_TENANT": str(NOTES_PER_BANK),
    "AML_MCP_AML__EMBEDDER": "static",
    "AML_MCP_AML__REEMBED_IN_BACKGROUND": "false",
    "AML_MCP_TASKS__LEASE_MS": "3000",
    "AML_MCP_TASKS__HEARTBEAT_MS": "300",
    "AML_MCP_TASKS__CLAIM_INTERVAL_MS": "1000",
}


@dataclass(frozen=True)
class Caller:
    bank: str
    analyst: str
    client_id: str
    token: str

    @property
    def label(self) -> str:
        return f"{self.bank}/{self.analyst}/{self.client_id}"


@dataclass
class AmlCluster:
    cluster: Cluster
    data_dir: Path
    env: dict[str, str]

    @property
    def base(self) -> str:
        return self.cluster.url.removesuffix("/mcp")

    def replica_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port, proc in self.cluster.replicas if proc.poll() is None]

    def mint(self, bank: str, analyst: str, client_id: str, scope: str = ALL_SCOPES) -> str:
        """A token from the shared development issuer, minted by `aml-mcp token` as an operator would."""
        minted = subprocess.run(
            [
                sys.executable, "-m", "aml_mcp", "token", "--data-dir", str(self.data_dir),
                "--public-url", self.cluster.url, "--subject", analyst, "--tenant", bank,
                "--client", client_id, "--scope", scope,
            ],
            env=self.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert minted.returncode == 0, minted.stderr
        return minted.stdout.strip()


@pytest.fixture(scope="module")
def aml(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmlCluster]:
    url = database_url()
    check_reachable(url)
    work = tmp_path_factory.mktemp("aml-cluster")
    with running_cluster(
        replicas=3, workers=2, database_url=url, catalog="aml", work_dir=work, env=AML_ENV
    ) as cluster:
        env = {
            **os.environ,
            **AML_ENV,
            "AML_MCP_DATABASE_URL": url,
            "AML_MCP_DATABASE_SCHEMA": cluster.schema,
        }
        # The operator's own directory: tokens come from the issuer's keys in PostgreSQL.
        yield AmlCluster(cluster, work / "operator", env)


@pytest.fixture(scope="module")
def callers(aml: AmlCluster) -> list[Caller]:
    return [
        Caller(bank, analyst, client_id, aml.mint(bank, analyst, client_id))
        for bank in BANKS
        for analyst in ANALYSTS
        for client_id in CLIENTS
    ]


def _error(response: httpx.Response) -> tuple[int, Any]:
    """The refusal as the caller sees it: the HTTP status and the JSON-RPC error."""
    body = response.json()
    assert "result" not in body, body
    return response.status_code, body["error"]


def _state(http: httpx.Client, task_id: str, token: str) -> dict[str, Any]:
    response = task_request(http, "tasks/get", task_id, token=token)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def _wait(http: httpx.Client, task_id: str, token: str, *statuses: str) -> dict[str, Any]:
    return eventually(
        lambda: _state(http, task_id, token),
        until=lambda state: state["status"] in statuses,
        timeout=60,
        interval=0.1,
        what=f"task {task_id[:8]} in {statuses}",
    )


def test_the_task_isolation_matrix_holds_on_every_replica(aml: AmlCluster, callers: list[Caller]) -> None:
    cases = demo_cases_by_bank()
    tasks: dict[str, str] = {}
    with httpx.Client(base_url=aml.base, timeout=30) as http:
        for caller in callers:
            case_id = case_needing_dob(cases[caller.bank])
            task = create(http, "draft_sar_batch", {"case_ids": [case_id]}, token=caller.token)
            tasks[caller.label] = task["taskId"]
        waiting = {
            caller.label: _wait(http, tasks[caller.label], caller.token, "input_required")
            for caller in callers
        }
    assert len(set(tasks.values())) == len(callers)

    answer = {"dob": {"action": "accept", "content": {"date_of_birth": "1970-01-01"}}}
    requests: list[tuple[str, dict[str, Any]]] = [
        ("tasks/get", {}),
        ("tasks/update", {"inputResponses": answer}),
        ("tasks/cancel", {}),
    ]
    for replica in aml.replica_urls():
        with httpx.Client(base_url=replica, timeout=30) as http:
            for caller in callers:
                for method, extra in requests:
                    unknown = _error(
                        task_request(http, method, secrets.token_urlsafe(16), extra=extra, token=caller.token)
                    )
                    for owner, task_id in tasks.items():
                        if owner == caller.label:
                            continue
                        refused = _error(task_request(http, method, task_id, extra=extra, token=caller.token))
                        assert refused == unknown, (replica, caller.label, owner, method, refused)

    with httpx.Client(base_url=aml.base, timeout=30) as http:
        for caller in callers:
            after = _state(http, tasks[caller.label], caller.token)
            before = waiting[caller.label]
            assert after["status"] == "input_required", (caller.label, after)
            assert after["inputRequests"] == before["inputRequests"], caller.label
        for caller in callers:
            (key,) = waiting[caller.label]["inputRequests"]
            answer = {key: {"action": "accept", "content": {"date_of_birth": "1970-01-01"}}}
            response = task_request(
                http,
                "tasks/update",
                tasks[caller.label],
                extra={"inputResponses": answer},
                token=caller.token,
            )
            assert response.status_code == 200 and "error" not in response.json(), response.text
        for caller in callers:
            done = _wait(http, tasks[caller.label], caller.token, "completed", "failed", "cancelled")
            assert done["status"] == "completed", (caller.label, done)
            assert done["result"]["structuredContent"]["drafted"] == 1, (caller.label, done["result"])


def test_a_listen_stream_hears_its_own_task_and_nothing_of_a_foreign_one(
    aml: AmlCluster, callers: list[Caller]
) -> None:
    cases = demo_cases_by_bank()
    me, other = callers[0], callers[-1]  # two banks, two analysts, two clients apart
    assert me.bank != other.bank
    with httpx.Client(base_url=aml.base, timeout=httpx.Timeout(30, read=60)) as http:
        foreign = create(
            http, "draft_sar_batch", {"case_ids": [case_needing_dob(cases[other.bank])]}, token=other.token
        )["taskId"]
        own = create(
            http, "draft_sar_batch", {"case_ids": [case_needing_dob(cases[me.bank])]}, token=me.token
        )["taskId"]
        own_waiting = _wait(http, own, me.token, "input_required")
        foreign_waiting = _wait(http, foreign, other.token, "input_required")
        headers = {"authorization": f"Bearer {me.token}"}
        with listening(
            http, {"taskIds": [foreign, own]}, capabilities=WITH_TASKS, extra_headers=headers
        ) as stream:
            assert stream.next() is not None  # the acknowledgement
            # The foreign task moves to its end while the stream is open; then the stream's own.
            for task_id, token, state in (
                (foreign, other.token, foreign_waiting),
                (own, me.token, own_waiting),
            ):
                (key,) = state["inputRequests"]
                answer = {key: {"action": "accept", "content": {"date_of_birth": "1970-01-01"}}}
                response = task_request(
                    http, "tasks/update", task_id, extra={"inputResponses": answer}, token=token
                )
                assert response.status_code == 200 and "error" not in response.json(), response.text
            heard: list[dict[str, Any]] = []
            while not heard or heard[-1]["params"]["status"] != "completed":
                note = stream.next(timeout=60)
                assert note is not None, heard
                assert note["method"] == "notifications/tasks", note
                heard.append(note)
        assert {note["params"]["taskId"] for note in heard} == {own}
        assert _wait(http, foreign, other.token, "completed")["status"] == "completed"
        # The foreign task's owner could have heard it; this stream never named it back.
        assert foreign not in json.dumps(heard)


def test_search_and_evaluation_never_cross_banks(aml: AmlCluster, callers: list[Caller]) -> None:
    first, second = BANKS
    own_notes = {t.name: {d.note.note_id for d in generate_notes(t, NOTES_PER_BANK)} for t in TENANTS[:2]}
    reader = next(c for c in callers if c.bank == second)
    target = next(d.note for d in generate_notes(TENANTS[0], NOTES_PER_BANK) if d.note.subjects[0].account_id)
    queries = [
        f"account {target.subjects[0].account_id}",
        target.subjects[0].name,
        target.case_id,
        target.text[:200],
    ]
    with httpx.Client(base_url=aml.base, timeout=30) as http:
        # Round-robin: each query goes to every replica in turn.
        for query in queries * len(aml.cluster.replicas):
            response = call_tool(http, "search_aml_notes", {"query": query, "top_k": 20}, token=reader.token)
            assert response.status_code == 200, response.text
            hits = response.json()["result"]["structuredContent"]["results"]
            assert {hit["note_id"] for hit in hits} <= own_notes[second], query
            assert not {hit["note_id"] for hit in hits} & own_notes[first], query

        owner = next(c for c in callers if c.bank == first)
        evaluation = create(http, "run_full_eval", {}, token=owner.token)["taskId"]
        done = _wait(http, evaluation, owner.token, "completed", "failed", "cancelled")
        assert done["status"] == "completed", done
        report = done["result"]["structuredContent"]
        assert (report["notes"], report["cases"]) == (NOTES_PER_BANK, len(demo_cases_by_bank()[first]))
    for replica in aml.replica_urls():
        with httpx.Client(base_url=replica, timeout=30) as http:
            assert _state(http, evaluation, owner.token)["status"] == "completed"
            refused = _error(task_request(http, "tasks/get", evaluation, token=reader.token))
            assert refused == _error(
                task_request(http, "tasks/get", secrets.token_urlsafe(16), token=reader.token)
            )


def test_the_isolation_oracle_finds_nothing_of_bank_b_through_the_balancer(
    aml: AmlCluster, tmp_path: Path
) -> None:
    """The isolation oracle's subset that a cluster can show: the MCP methods and tools, the lab's
    API, the well-known documents, health, readiness and the authorization server, through HAProxy
    (so every request lands on whichever replica is next, and every task runs on a worker), as
    bank A's callers with bank B's ids as input. The whole oracle, with its coverage check, runs on
    one process on both backends (`tests/isolation`)."""
    banks = Banks(a=BANKS[0], b=BANKS[1])
    notes = notes_for(banks, tmp_path)
    for tenant, path in notes.files.items():
        ingested = subprocess.run(
            [sys.executable, "-m", "aml_mcp", "ingest", str(path), "--tenant", tenant,
             "--data-dir", str(tmp_path / "ingest")],
            env=aml.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert ingested.returncode == 0, ingested.stdout + ingested.stderr

    def mint(*, subject: str, tenant: str, client_id: str, scope: str, **_: Any) -> str:
        return aml.mint(tenant, subject, client_id, scope)

    with httpx.Client(base_url=aml.base, timeout=30) as http:
        seed, _ = seed_tasks(http, mint, banks, notes, callers=False)
        owner_token = seed.task_owner_tokens[seed.owner_task_ids[0]]
        analyst = {"subject": "a-analyst", "tenant": banks.a, "client_id": "oracle-a-client"}
        elsewhere = {"subject": "a-owner", "tenant": banks.a, "client_id": "oracle-other-client"}
        owner = {"subject": "a-owner", "tenant": banks.a, "client_id": "oracle-a-client"}

        def caller(name: str, who: dict[str, str], scope: str, token: str | None = None) -> OracleCaller:
            token = token or mint(**who, scope=scope)
            return OracleCaller(name, token, **who, scopes=frozenset(scope.split()), owner=who is owner)

        callers = [
            OracleCaller("anonymous", None),
            caller("read", analyst, "aml:read"),
            caller("admin", analyst, "aml:admin"),
            caller("owner on another client", elsewhere, "aml:admin"),
            caller("owner", owner, "aml:admin", owner_token),
        ]
        b_token = seed.task_owner_tokens[seed.b_task_ids[0]]
        report = Oracle(
            http,
            seed,
            callers,
            units=[],
            mcp_methods=[],
            tools=[],
            during_listen=lambda: call_tool(
                http, "draft_sar_batch", {"case_ids": seed.b_case_ids}, token=b_token
            ).raise_for_status(),
        ).run()
    assert not report.violations, "\n".join(str(v) for v in report.violations[:40])
    assert report.controls == {"bank A sees its own note": True, "the owner sees its own task": True}
    assert {
        "tools/call",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "subscriptions/listen",
    } <= report.covered_methods
