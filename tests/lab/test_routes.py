"""The lab's server side: its assets and configuration, the audit view (the caller's bank only, the
audit scope, the same 401/403 as `/mcp`) and the simulation's flawed tokens, each refused at `/mcp`
for its own reason and visible in the audit view of the caller who asked for it, and no one else."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from aml_mcp.config import Settings
from aml_mcp.lab.settings import LabSettings
from tests.support.mcp_http import message, post
from tests.support.oauth import SecuredServer, TestIssuer, audit_events, auth_settings, secured_server
from tests.support.scoped_catalog import scoped_catalog
from tests.support.waiting import eventually

CAROL = {"subject": "carol", "tenant": "meridian-bank", "client_id": "aml-mcp-lab", "scope": "aml:admin"}
ERIN = {"subject": "erin", "tenant": "harbour-trust", "client_id": "aml-mcp-lab", "scope": "aml:admin"}
ALICE = {"subject": "alice", "tenant": "meridian-bank", "client_id": "aml-mcp-lab", "scope": "aml:read"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with secured_server(tmp_path_factory.mktemp("lab"), scoped_catalog(), dev=True) as running:
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
    assert config == {
        "resource": server.resource,
        "clientId": "aml-mcp-lab",
        "tenantClaim": "tenant",
        "auditScope": "aml:admin",
        "simulation": True,
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


def test_flawed_tokens_are_refused_each_for_its_reason(server: SecuredServer) -> None:
    carol = token(server, CAROL)
    minted = server.http.post("/lab/api/simulation", headers={"authorization": f"Bearer {carol}"})
    assert minted.status_code == 200
    tokens = {entry["kind"]: entry for entry in minted.json()["tokens"]}
    assert set(tokens) == {"wrong_audience", "expired", "no_scope", "other_bank"}
    call = {"name": "probe_read", "arguments": {}}

    wrong = server.post("tools/call", call, token=tokens["wrong_audience"]["token"])
    assert wrong.status_code == 401
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    expired = server.post("tools/call", call, token=tokens["expired"]["token"])
    assert expired.status_code == 401
    assert 'error="invalid_token"' in expired.headers["www-authenticate"]
    scopeless = server.post("tools/call", call, token=tokens["no_scope"]["token"])
    assert scopeless.status_code == 403
    other = server.post("tools/call", call, token=tokens["other_bank"]["token"])
    assert other.status_code == 200
    assert other.json()["result"]["structuredContent"]["tenant"] == "harbour-trust"

    ids = {entry["tokenId"]: kind for kind, entry in tokens.items()}

    def seen(event: dict[str, Any]) -> str | None:
        unverified = (event.get("detail") or {}).get("unverified") or {}
        return ids.get(event["token_id"]) or ids.get(unverified.get("jti"))

    def all_four() -> list[dict[str, Any]] | None:
        events: list[dict[str, Any]] = feed(server, carol).json()["events"]
        return events if {seen(event) for event in events} >= set(tokens) else None

    events = eventually(all_four, timeout=5, what="every simulated token's record in carol's feed")
    calls = [event for event in events if seen(event) and event["method"] == "tools/call"]
    reasons = {seen(event): event["reason"] for event in calls}
    assert reasons["wrong_audience"] != reasons["expired"]  # each refusal says why
    assert reasons["no_scope"] == "insufficient_scope"
    assert reasons["other_bank"] == "ok"

    # Another bank's admin never sees carol's refused simulations (no tenant was known for them).
    erin_view = feed(server, token(server, ERIN)).json()["events"]
    unverified_ids = {((e.get("detail") or {}).get("unverified") or {}).get("jti") for e in erin_view}
    assert not unverified_ids & {tokens[k]["tokenId"] for k in ("wrong_audience", "expired")}
    # ... nor do carol's own colleagues' simulations leak to her through these token ids.
    assert all(event["tenant"] in {"meridian-bank", "harbour-trust", None} for event in events)


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
        assert running.http.get("/lab/config.json").json()["simulation"] is False
        bearer = running.mint(subject="carol", tenant="meridian-bank", scope="aml:admin")
        answer = running.http.post("/lab/api/simulation", headers={"authorization": f"Bearer {bearer}"})
        assert answer.status_code == 404


def test_the_lab_needs_authentication() -> None:
    with pytest.raises(ValidationError, match=r"lab\.enabled needs auth\.enabled"):
        Settings(lab=LabSettings(enabled=True), auth={"enabled": False})


def test_a_request_without_a_token_is_found_by_the_trace_it_carried(server: SecuredServer) -> None:
    carol, erin = token(server, CAROL), token(server, ERIN)
    trace = secrets.token_hex(16)
    # A tool name of its own: identical anonymous refusals close together are folded into one count.
    body = message("tools/call", {"name": f"probe-{trace[:8]}", "arguments": {}})
    body["params"]["_meta"]["traceparent"] = f"00-{trace}-{secrets.token_hex(8)}-01"
    assert post(server.http, body).status_code == 401
    found = events_until(server, carol, lambda e: e["reason"] == "no_token", trace=trace)
    assert [e["detail"]["trace_id"] for e in found if e["reason"] == "no_token"] == [trace]
    # Without the trace, or with another one, the anonymous refusal is nobody's bank's.
    assert all(e["reason"] != "no_token" for e in feed(server, erin).json()["events"])
    other = secrets.token_hex(16)
    assert all(e["reason"] != "no_token" for e in feed(server, erin, trace=other).json()["events"])


def test_a_trace_never_reveals_a_refused_token(server: SecuredServer) -> None:
    """A refused token's record holds its unverified claims: a trace alone does not show it to anyone."""
    trace = secrets.token_hex(16)
    elsewhere = server.dev_token(**ERIN, audience="https://elsewhere.example/mcp").token
    body = message("tools/call", {"name": f"probe-{trace[:8]}", "arguments": {}})  # not folded, as above
    body["params"]["_meta"]["traceparent"] = f"00-{trace}-{secrets.token_hex(8)}-01"
    assert post(server.http, body, token=elsewhere).status_code == 401
    server.wait_for_audit(decision="deny", method="tools/call")
    carol = token(server, CAROL)

    def traced(event: dict[str, Any]) -> bool:
        return (event.get("detail") or {}).get("trace_id") == trace

    eventually(
        lambda: any(traced(e) for e in audit_events(server.data_dir)), timeout=5, what="the refusal's record"
    )
    assert not any(traced(e) for e in feed(server, carol, trace=trace).json()["events"])


@pytest.mark.parametrize("traces", [["A" * 32], ["0" * 31], [secrets.token_hex(16)] * 17])
def test_malformed_traces_are_refused(server: SecuredServer, traces: list[str]) -> None:
    answer = server.http.get(
        "/lab/api/audit",
        params={"trace": traces},
        headers={"authorization": f"Bearer {token(server, CAROL)}"},
    )
    assert answer.status_code == 400
    assert "trace must be" in answer.json()["error"]
