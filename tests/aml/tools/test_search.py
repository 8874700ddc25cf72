"""`search_aml_notes` over HTTP (in-process) with real tokens: results, filters, errors, scopes, isolation."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from aml_mcp.aml.demo.corpus import DemoNote
from tests.aml.tools.aml_client import A, AmlClient, B, C, aml_server, assert_matches_output_schema
from tests.support.oauth import TestIssuer


@pytest.fixture(scope="module")
def aml(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer, demo_data: Path) -> Iterator[AmlClient]:
    with aml_server(tmp_path_factory.mktemp("aml-search"), issuer, demo=demo_data) as client:
        yield client


def test_tools_list_shows_the_three_tools_with_scopes_and_policies(aml: AmlClient) -> None:
    assert list(aml.tools) == ["search_aml_notes", "run_full_eval", "draft_sar_batch"]
    scopes = {name: tool["_meta"]["aml-mcp/requiredScope"] for name, tool in aml.tools.items()}
    assert scopes == {
        "search_aml_notes": "aml:read",
        "run_full_eval": "aml:eval",
        "draft_sar_batch": "aml:draft",
    }
    search = aml.tools["search_aml_notes"]
    assert search["annotations"]["readOnlyHint"] is True and search["annotations"]["idempotentHint"] is True
    assert search["inputSchema"]["additionalProperties"] is False
    assert "tenant" not in search["inputSchema"]["properties"]
    assert all("outputSchema" in tool for tool in aml.tools.values())


def test_an_account_id_finds_its_notes_first(aml: AmlClient, demo_notes: dict[str, list[DemoNote]]) -> None:
    note = next(d.note for d in demo_notes[A] if d.note.subjects[0].account_id)
    subject = note.subjects[0]
    result = aml.result("search_aml_notes", {"query": f"account {subject.account_id}", "top_k": 5}, tenant=A)
    assert_matches_output_schema(aml.tools["search_aml_notes"], result["structuredContent"])
    hits = result["structuredContent"]["results"]
    carriers = {
        d.note.note_id
        for d in demo_notes[A]
        if any(s.account_id == subject.account_id for s in d.note.subjects)
    }
    assert hits and hits[0]["note_id"] in carriers
    assert subject.name in hits[0]["matched_subjects"]
    assert hits[0]["matched_identifiers"] == ["account_id"]
    assert all("date_of_birth" not in s for s in hits[0]["subjects"])
    assert hits[0]["note_id"] in result["content"][0]["text"]


def test_snippets_highlight_the_query_words(aml: AmlClient) -> None:
    hits = aml.search(A, query="cash deposits", top_k=5)
    assert hits and any("**" in h["snippet"] for h in hits)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


def test_filters_restrict_every_result(aml: AmlClient, demo_notes: dict[str, list[DemoNote]]) -> None:
    note = demo_notes[A][10].note
    by_case = aml.search(A, query="activity", case_id=note.case_id, top_k=50)
    assert by_case and {h["case_id"] for h in by_case} == {note.case_id}

    typology = note.typologies[0]
    by_typology = aml.search(A, query="suspicious transfers", typology=typology.upper(), top_k=20)
    assert by_typology and all(typology in h["typologies"] for h in by_typology)

    day = note.created_at.date()
    window = aml.search(
        A, query="funds", date_from=day.isoformat(), date_to=(day + timedelta(days=30)).isoformat(), top_k=50
    )
    assert window
    assert all(day <= date.fromisoformat(h["created_at"][:10]) <= day + timedelta(days=30) for h in window)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"query": "cash", "top_k": 0}, "top_k"),
        ({"query": "cash", "top_k": 51}, "top_k"),
        ({"query": ""}, "query"),
        ({"top_k": 3}, "query"),
        ({"query": "cash", "date_from": "last tuesday"}, "ISO 8601"),
        ({"query": "cash", "date_from": "2024-05-01", "date_to": "2024-01-01"}, "date_from is after date_to"),
        ({"query": "cash", "tenant": B}, "tenant"),
        ({"query": "cash", "case_id": 42}, "case_id"),
        ({"query": "cash", "typology": "!!!"}, "typology"),
    ],
)
def test_bad_arguments_are_tool_errors(aml: AmlClient, arguments: dict[str, Any], expected: str) -> None:
    result = aml.result("search_aml_notes", arguments, tenant=A)
    assert result["isError"] is True
    assert expected in result["content"][0]["text"]
    assert "structuredContent" not in result


def test_scopes_are_enforced_per_tool(aml: AmlClient) -> None:
    cases = [
        ("search_aml_notes", {"query": "cash"}, "aml:draft", "aml:read"),
        ("run_full_eval", {}, "aml:read aml:draft", "aml:eval"),
        ("draft_sar_batch", {"case_ids": ["x"]}, "aml:read aml:eval", "aml:draft"),
    ]
    for name, arguments, held, needed in cases:
        refused = aml.call(name, arguments, tenant=A, scope=held)
        assert refused.status_code == 403, (name, refused.text)
        challenge = refused.headers["www-authenticate"]
        assert 'error="insufficient_scope"' in challenge and f'scope="{needed}"' in challenge
    allowed = aml.call("search_aml_notes", {"query": "cash"}, tenant=A, scope="aml:admin")
    assert allowed.status_code == 200 and allowed.json()["result"]["structuredContent"]["results"]


def test_tenants_without_notes_get_empty_results_not_errors(aml: AmlClient) -> None:
    for tenant in ("new-bank", "Bank With Spaces"):
        result = aml.result("search_aml_notes", {"query": "cash deposits"}, tenant=tenant)
        assert result.get("isError") is not True
        assert result["structuredContent"] == {"results": []}


def _probes_from(victim: list[DemoNote], rng: random.Random) -> list[dict[str, Any]]:
    """Arguments built from another bank's exact identifiers, wording, cases, typologies and dates."""
    probes: list[dict[str, Any]] = []
    for demo in rng.sample(victim, 4):
        note = demo.note
        subject = note.subjects[0]
        texts = [note.note_id, note.case_id, subject.name, note.text[:120], *note.counterparties]
        if subject.account_id:
            texts += [subject.account_id, subject.account_id.replace(" ", "").replace("-", "")]
        probes += [{"query": text, "top_k": 50} for text in texts]
        day = note.created_at.date().isoformat()
        probes += [
            {"query": subject.name, "case_id": note.case_id, "top_k": 50},
            {"query": note.text[:60], "typology": note.typologies[0], "top_k": 50},
            {"query": note.note_id, "date_from": day, "date_to": day, "top_k": 50},
            {
                "query": f"{subject.name} {note.case_id}",
                "typology": note.typologies[0],
                "date_from": day,
                "top_k": 50,
            },
        ]
    probes += [
        {"query": "*", "top_k": 50},
        {"query": '" OR 1=1 --', "top_k": 50},
        {"query": "NEAR(cash deposits) AND tenant:*", "top_k": 50},
        {"query": "cash", "date_from": "1900-01-01", "date_to": "2100-01-01", "top_k": 50},
    ]
    return probes


@pytest.mark.slow
def test_no_query_filter_or_argument_returns_another_banks_note(
    aml: AmlClient, demo_notes: dict[str, list[DemoNote]]
) -> None:
    rng = random.Random(11)
    owned = {bank: {d.note.note_id for d in notes} for bank, notes in demo_notes.items()}
    searched = returned = 0
    for caller, victim in ((A, B), (B, C), (C, A)):
        for arguments in _probes_from(demo_notes[victim], rng):
            hits = aml.search(caller, **arguments)
            searched += 1
            returned += len(hits)
            ids = {h["note_id"] for h in hits}
            assert not ids & owned[victim], (caller, arguments)
            assert ids <= owned[caller], (caller, arguments)
            if "case_id" in arguments:
                assert hits == []  # the victim's case id names no case of the caller's
        # The victim's own search for the same note does find it: the probes were real identifiers.
        probe = demo_notes[victim][0].note
        assert probe.note_id in {h["note_id"] for h in aml.search(victim, query=probe.note_id, top_k=5)}
    assert searched > 120 and returned > 0

    smuggled = aml.result("search_aml_notes", {"query": "cash", "tenant": B}, tenant=A)
    assert smuggled["isError"] is True and "structuredContent" not in smuggled
