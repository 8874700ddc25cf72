"""The lab's server side, over real HTTP: its assets and configuration, the audit view (the caller's
bank only, the audit scope, the same 401/403 as `/mcp`) and the simulation, which runs each flawed
request inside the server and answers what was refused and recorded — never a credential."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from aml_mcp.config import Settings
from aml_mcp.lab.settings import LabSettings
from aml_mcp.principal import SIMULATED_CLAIM
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server
from tests.support.scoped_catalog import scoped_catalog
from tests.support.waiting import eventually

CAROL = {"subject": "carol", "tenant": "meridian-bank", "client_id": "aml-mcp-lab", "scope": "aml:admin"}
ERIN = {"subject": "erin", "tenant": "harbour-trust", "client_id": "aml-mcp-lab", "scope": "aml:admin"}
ALICE = {"subject": "alice", "tenant": "meridian-bank", "client_id": "aml-mcp-lab", "scope": "aml:read"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with secured_server(
        tmp_path_factory.mktemp("lab"), scoped_catalog(), dev=True, real_socket=True
    ) as running:
        yield running


def token(server: SecuredServer, who: dict[str, str]) -> str:
    return server.dev_token(**who).token


def feed(server: SecuredServer, bearer: str | None, **query: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {bearer}"} if bearer else {}
    return server.http.get("/lab/api/audit", params=query, headers=headers)


def events_until(server: SecuredServer, bearer: str, matches: Any, **query: Any) -> list[dict[str, Any]]:
    """The caller's feed once it holds an event `matches` accepts (the audit trail is written in batches)."""

    def ready() -> list[dict[str, Any]] | None:
        events: list[dict[str, Any]] = feed(server, bearer, **query).json()["events"]
        return events if any(matches(event) for event in events) else None

    found: list[dict[str, Any]] = eventually(ready, timeout=5, what="the audit feed to show the event")
    return found


def test_the_page_and_its_configuration_are_served(server: SecuredServer) -> None:
    assert server.http.get("/lab").headers["location"] == "/lab/"
    page = server.http.get("/lab/")
    assert page.status_code == 200
    for heading in ("Tools", "Tasks", "Authorization", "Audit"):
        assert f">{heading}</h2>" in page.text
    assert server.http.get("/lab/js/app.js").headers["content-type"].startswith("text/javascript")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["referrer-policy"] == "no-referrer"  # the sign-in code never leaves in a Referer
    config = server.http.get("/lab/config.json").json()
    demo_users = config.pop("demoUsers")
    assert config == {
        "resource": server.resource,
        "clientId": "aml-mcp-lab",
        "tenantClaim": "tenant",
        "auditScope": "aml:admin",
        # What each scope amounts to, as the gate reckons it: the page asks only for what this allows.
        "scopeImplies": {
            "aml:admin": ["aml:admin", "aml:draft", "aml:eval", "aml:read"],
            "aml:draft": ["aml:draft"],
            "aml:eval": ["aml:eval"],
            "aml:read": ["aml:read"],
        },
        "simulation": ["wrong_audience", "expired", "no_scope", "no_token", "other_bank"],
    }
    # The development authorization server's demo users, as its sign-in page lists them (never a password).
    assert [user["username"] for user in demo_users] == ["alice", "carol", "bob", "dave", "erin"]
    assert demo_users[1] == {
        "username": "carol",
        "bank": "meridian-bank",
        "scopes": ["aml:admin"],
        "description": "AML lead at Meridian Bank: everything",
    }


def test_the_audit_view_refuses_like_mcp(server: SecuredServer) -> None:
    anonymous = feed(server, None)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer ")
    assert "resource_metadata=" in anonymous.headers["www-authenticate"]
    lacking = feed(server, token(server, ALICE))
    assert lacking.status_code == 403
    assert 'error="insufficient_scope"' in lacking.headers["www-authenticate"]
    assert 'scope="aml:admin"' in lacking.headers["www-authenticate"]
    server.wait_for_audit(method="lab/audit", subject="alice", decision="deny", reason="insufficient_scope")


def test_each_bank_sees_its_own_events_only(server: SecuredServer) -> None:
    carol, erin = token(server, CAROL), token(server, ERIN)
    assert server.post("tools/call", {"name": "probe_read", "arguments": {}}, token=carol).status_code == 200
    assert server.post("tools/call", {"name": "probe_read", "arguments": {}}, token=erin).status_code == 200
    mine = events_until(server, carol, lambda e: e["method"] == "tools/call" and e["subject"] == "carol")
    theirs = events_until(server, erin, lambda e: e["method"] == "tools/call" and e["subject"] == "erin")
    assert {event["tenant"] for event in mine} == {"meridian-bank"}
    assert {event["tenant"] for event in theirs} == {"harbour-trust"}
    # The feed's own reads are audited like any decision, and shown when asked for by method.
    assert all(event["method"] != "lab/audit" for event in feed(server, carol).json()["events"])
    reads = events_until(server, carol, lambda e: e["subject"] == "carol", method="lab/audit")
    assert {event["method"] for event in reads} == {"lab/audit"}


def test_filters_and_paging(server: SecuredServer) -> None:
    carol = token(server, CAROL)
    server.post("tools/call", {"name": "probe_eval", "arguments": {}}, token=token(server, ALICE))
    denied = events_until(server, carol, lambda e: e["reason"] == "insufficient_scope", decision="deny")
    assert denied and all(event["decision"] == "deny" for event in denied)
    by_alice = feed(server, carol, subject="alice").json()["events"]
    assert by_alice and {event["subject"] for event in by_alice} == {"alice"}
    calls = feed(server, carol, method="tools/call").json()["events"]
    assert calls and {event["method"] for event in calls} == {"tools/call"}
    newest = max(event["seq"] for event in feed(server, carol).json()["events"])
    later = feed(server, carol, after=newest).json()["events"]
    assert all(event["seq"] > newest for event in later)


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ({"after": "abc"}, "after must be an integer"),
        ({"after": "-1"}, "after must not be negative"),
        ({"subject": "x" * 201}, "subject is longer than 200 characters"),
        ({"after": "9" * 400}, "after is out of range"),
        ({"after": str(2**63)}, "after is out of range"),
    ],
)
def test_bad_queries_get_a_clear_400(server: SecuredServer, query: dict[str, str], problem: str) -> None:
    answer = feed(server, token(server, CAROL), **query)
    assert answer.status_code == 400
    assert answer.json() == {"error": problem}


def test_hostile_filter_text_is_refused_or_matches_nothing(server: SecuredServer) -> None:
    carol = token(server, CAROL)
    answer = server.http.get(
        "/lab/api/audit?subject=%ED%A0%80&method=%00", headers={"authorization": f"Bearer {carol}"}
    )
    assert answer.status_code in {200, 400}
    if answer.status_code == 200:
        assert answer.json()["events"] == []


EXPECTED = {
    # case: (HTTP status, the audit reason of the refusal)
    "wrong_audience": (401, "wrong_audience"),
    "expired": (401, "expired"),
    "no_scope": (403, "insufficient_scope"),
    "no_token": (401, "no_token"),
}


def simulate(server: SecuredServer, bearer: str | None, body: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {bearer}"} if bearer else {}
    if isinstance(body, bytes):
        return server.http.post("/lab/api/simulation", content=body, headers=headers)
    return server.http.post("/lab/api/simulation", json=body, headers=headers)


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_each_case_is_refused_on_the_server_for_its_reason_with_its_audit_record(
    server: SecuredServer, case: str
) -> None:
    answer = simulate(server, token(server, CAROL), {"case": case, "tool": "probe_read"})
    assert answer.status_code == 200, answer.text
    outcome = answer.json()
    status, reason = EXPECTED[case]
    assert outcome["case"] == case
    assert outcome["status"] == status
    assert outcome["request"] == {"method": "tools/call", "params": {"name": "probe_read", "arguments": {}}}
    assert outcome["challenge"].startswith("Bearer ")
    assert outcome["flaw"]
    refusals = [event for event in outcome["audit"] if event["decision"] == "deny"]
    assert [event["reason"] for event in refusals] == [reason]
    assert "token" not in outcome


def test_another_bank_reading_your_task_is_told_it_does_not_exist(server: SecuredServer) -> None:
    answer = simulate(server, token(server, CAROL), {"case": "other_bank", "taskId": secrets.token_hex(16)})
    assert answer.status_code == 200, answer.text
    outcome = answer.json()
    assert outcome["status"] == 400  # -32602, as for any unknown id
    assert outcome["message"]["error"] == {"code": -32602, "message": "Task not found"}
    assert outcome["request"]["method"] == "tasks/get"
    # The gate let the lookup through (it needs no scope for an unknown id); the handler refused it,
    # and its refusal is the request's one record (the gate's allow waits for it and gives way).
    assert [(event["decision"], event["reason"]) for event in outcome["audit"]] == [("deny", "not_found")]
    assert {event["tenant"] for event in outcome["audit"]} == {"aml-mcp-simulated-bank"}
    assert all(event["subject"].startswith("urn:aml-mcp:simulated:") for event in outcome["audit"])


def test_no_simulation_answer_holds_a_credential_the_server_accepts(server: SecuredServer) -> None:
    """Security review 2, N1: the answer handed out a valid token for another bank, with the caller's
    scopes. Every string of every case's answer is now tried as a bearer token: none is accepted."""
    bob = server.dev_token(subject="bob", tenant="harbour-trust", client_id="aml-mcp-cli", scope="aml:admin")
    answers = [
        simulate(server, bob.token, {"case": case, "tool": "probe_read", "taskId": "t"}).json()
        for case in [*EXPECTED, "other_bank"]
    ]
    candidates = {text for answer in answers for text in strings_in(answer) if len(text) >= 16}
    assert candidates  # the answers are not empty: there was something to try
    for text in candidates:
        if not text.isascii() or any(c.isspace() for c in text):
            continue  # cannot even be sent as a bearer token
        tried = server.post("tools/call", {"name": "probe_read", "arguments": {}}, token=text)
        assert tried.status_code == 401, text


def test_a_simulated_token_gets_past_the_gate_only_to_be_told_a_task_is_unknown(
    server: SecuredServer,
) -> None:
    """Belt and braces for N1: were a simulated token ever to leave the server, it could do nothing."""
    simulated = server.dev_token(
        subject="carol",
        tenant="meridian-bank",
        client_id="aml-mcp-lab",
        scope="aml:admin",
        extra={SIMULATED_CLAIM: "other_bank"},
    ).token
    call = server.post("tools/call", {"name": "probe_read", "arguments": {}}, token=simulated)
    assert call.status_code == 401
    assert 'error="invalid_token"' in call.headers["www-authenticate"]
    assert server.post("tools/list", token=simulated).status_code == 401
    # ... and it can never ask the lab for another run, nor read the audit view.
    assert simulate(server, simulated, {"case": "no_token"}).status_code == 401
    assert feed(server, simulated).status_code == 401
    tasks = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    lookup = server.post(
        "tasks/get", {"taskId": "0" * 32}, token=simulated, capabilities=tasks, **{"mcp-name": "0" * 32}
    )
    assert lookup.json()["error"]["message"] == "Task not found"
    server.wait_for_audit(reason="simulated_token", subject="carol", method="tools/call")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"not json", "the body must be a JSON object"),
        (b"[" * 3000, "the body must be a JSON object"),
        (b'{"case": "' + b"x" * 5000 + b'"}', "the body must be a JSON object"),
        ({"case": 1}, "the body must be a JSON object"),
        ({"case": "mint_me_a_token"}, "case must be one of"),
        ({"case": "other_bank"}, "taskId must be a string"),
        ({"case": "other_bank", "taskId": ["x"]}, "taskId must be a string"),
        ({"case": "other_bank", "taskId": "x" * 129}, "taskId must be a string"),
        (b'{"case": "other_bank", "taskId": "\\ud800"}', "taskId must be a string"),
        ({"case": "no_scope", "tool": ""}, "tool must be a string"),
    ],
)
def test_bad_simulation_requests_get_a_clear_400(server: SecuredServer, body: Any, problem: str) -> None:
    answer = simulate(server, token(server, CAROL), body)
    assert answer.status_code == 400
    assert problem in answer.json()["error"]


def test_the_simulation_is_rate_limited_per_caller(server: SecuredServer) -> None:
    limit = LabSettings().simulation_runs_per_minute
    dave = server.dev_token(subject="dave", tenant="meridian-bank", client_id="aml-mcp-lab", scope="aml:read")
    answers = [simulate(server, dave.token, {"case": "no_token"}) for _ in range(limit + 1)]
    assert [answer.status_code for answer in answers] == [200] * limit + [429]
    assert 1 <= int(answers[-1].headers["retry-after"]) <= 60
    # Another caller is not held back by dave's runs.
    assert simulate(server, token(server, CAROL), {"case": "no_token"}).status_code == 200


def test_the_simulation_needs_a_verified_caller(server: SecuredServer) -> None:
    assert server.http.post("/lab/api/simulation").status_code == 401
    wrong = server.dev_token(**CAROL, audience="https://elsewhere.example/mcp").token
    answer = server.http.post("/lab/api/simulation", headers={"authorization": f"Bearer {wrong}"})
    assert answer.status_code == 401


def test_no_lab_without_the_development_issuer(tmp_path: Any) -> None:
    with TestIssuer() as issuer, secured_server(tmp_path, scoped_catalog(), issuer=issuer) as running:
        assert running.http.get("/lab/").status_code == 404
        assert running.http.get("/lab/config.json").status_code == 404


def test_the_lab_on_purpose_with_another_issuer_has_no_simulation(tmp_path: Any) -> None:
    with (
        TestIssuer() as issuer,
        secured_server(
            tmp_path,
            scoped_catalog(),
            issuer=issuer,
            auth=auth_settings([issuer]),
            lab=LabSettings(enabled=True),
        ) as running,
    ):
        config = running.http.get("/lab/config.json").json()
        assert config["simulation"] == ["no_token"]
        assert config["demoUsers"] == []  # demo users are the development authorization server's only
        bearer = running.mint(subject="carol", tenant="meridian-bank", scope="aml:admin")
        answer = simulate(running, bearer, {"case": "no_scope", "tool": "probe_read"})
        assert answer.status_code == 400
        assert answer.json()["error"] == "case must be one of: no_token"
        assert simulate(running, bearer, {"case": "no_token", "tool": "probe_read"}).json()["status"] == 401


def test_the_lab_needs_authentication() -> None:
    with pytest.raises(ValidationError, match=r"lab\.enabled needs auth\.enabled"):
        Settings(lab=LabSettings(enabled=True), auth={"enabled": False})
