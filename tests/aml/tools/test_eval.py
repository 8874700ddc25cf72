"""`run_full_eval` as a task (in-process HTTP): check pass rate, retrieval metrics, baselines, foreign ids."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aml_mcp.aml.demo.corpus import DemoNote
from aml_mcp.aml.sar.checks import CHECKS
from aml_mcp.cli import main as cli_main
from tests.aml.tools.aml_client import A, AmlClient, C, aml_server, assert_matches_output_schema, cases_of
from tests.support.oauth import TestIssuer

EVAL = "aml:eval"
OWN = "acme-bank"


def _acme_notes(demo_notes: dict[str, list[DemoNote]]) -> list[dict[str, Any]]:
    """A bank's own notes: one clean case, one naming another bank's account, one with an unknown typology.

    The clean case's subject shares a name with a customer of another bank, which is no leak.
    """
    shared_name = demo_notes[A][0].note.subjects[0].name
    foreign_account = next(s.account_id for d in demo_notes[A] for s in d.note.subjects if s.account_id)

    def note(case: int, k: int, text: str, typology: str, subject: str, account: str) -> dict[str, Any]:
        return {
            "note_id": f"ACME-N{case}-{k}",
            "case_id": f"ACME-C{case}",
            "created_at": f"2024-0{case}-1{k}T10:00:00Z",
            "text": text,
            "subjects": [
                {"name": subject, "account_id": account, "role": "primary", "date_of_birth": "1970-05-06"}
            ],
            "typologies": [typology],
            "amount": "12500.00",
            "currency": "USD",
            "jurisdictions": ["United States", "Panama"],
            "counterparties": ["Harbor Logistics Ltd"],
        }

    deposits = (
        "The customer made eleven cash deposits of USD 9,500.00 each, just below the reporting threshold."
    )
    wires = "Funds were then wired to Panama through a shell company with no apparent business purpose."
    return [
        note(1, 1, deposits, "structuring", shared_name, "AC-7781-0001"),
        note(1, 2, wires, "structuring", shared_name, "AC-7781-0001"),
        note(
            2,
            1,
            f"{deposits} Part of the funds went to account {foreign_account}.",
            "structuring",
            "Ada Q. Lovell",
            "AC-7781-0002",
        ),
        note(3, 1, f"{deposits} {wires}", "pig_butchering", "Ben R. Oduya", "AC-7781-0003"),
    ]


@pytest.fixture(scope="module")
def aml(
    tmp_path_factory: pytest.TempPathFactory,
    issuer: TestIssuer,
    demo_notes: dict[str, list[DemoNote]],
    demo_data: Path,
) -> Iterator[AmlClient]:
    data_dir: Path = tmp_path_factory.mktemp("aml-eval")
    source = data_dir / "acme.jsonl"
    source.write_text("".join(json.dumps(n) + "\n" for n in _acme_notes(demo_notes)))
    with aml_server(data_dir, issuer, demo=demo_data) as client:
        # `aml-mcp ingest` into the running server's data directory: visible without a restart.
        assert cli_main(["ingest", str(source), "--tenant", OWN, "--data-dir", str(data_dir)]) == 0
        yield client


def _evaluate(aml: AmlClient, tenant: str, **arguments: Any) -> dict[str, Any]:
    task_id = aml.start("run_full_eval", arguments, tenant=tenant, scope=EVAL)
    done = aml.wait_for(task_id, "completed", "failed", tenant=tenant, scope=EVAL)
    assert done["status"] == "completed", done
    result: dict[str, Any] = done["result"]
    return result


def test_a_demo_bank_gets_check_pass_rate_and_retrieval_metrics(
    aml: AmlClient, demo_notes: dict[str, list[DemoNote]]
) -> None:
    result = _evaluate(aml, A)
    assert_matches_output_schema(aml.tools["run_full_eval"], result["structuredContent"])
    report = result["structuredContent"]
    cases = cases_of(demo_notes[A])
    lacking = {
        c
        for c, notes in cases.items()
        if any(s.date_of_birth is None or s.account_id is None for s in notes[0].subjects)
    }
    assert report["cases"] == len(cases) and report["notes"] == len(demo_notes[A])
    checks = report["code_checks"]
    # Drafted with no analyst to ask, exactly the cases lacking a SAR fact fail, and only on that.
    assert lacking and checks["failed"] == len(lacking)
    assert {f["case_id"] for f in checks["failures"]} == lacking
    assert all(f["failed_checks"] == ["required_fields"] for f in checks["failures"])
    assert checks["pass_rate"] == round(1 - len(lacking) / len(cases), 4)
    assert {name: row["pass_rate"] for name, row in checks["by_check"].items() if row["failed"]} == {
        "required_fields": checks["pass_rate"]
    }
    retrieval = report["retrieval"]
    assert retrieval["available"] is True and retrieval["queries"] > 100
    assert retrieval["recall_at_10"] > 0.4 and retrieval["ndcg_at_10"] > 0.4
    assert set(retrieval["by_kind"]) == {"paraphrase", "keyword", "account_id", "name", "case_id"}
    assert report["baseline"] is None and report["deltas"] is None and report["saved_baseline"] is None
    assert "Code checks:" in result["content"][0]["text"]


@pytest.mark.slow
def test_baselines_are_saved_compared_and_kept_per_bank(aml: AmlClient) -> None:
    first = _evaluate(aml, A, save_as_baseline=True)["structuredContent"]
    saved = first["saved_baseline"]["baseline_id"]

    again = _evaluate(aml, A)["structuredContent"]
    assert again["baseline"]["baseline_id"] == saved
    assert again["baseline"]["figures"]["code_check_pass_rate"] == first["code_checks"]["pass_rate"]
    deltas = again["deltas"]
    assert (deltas["code_check_pass_rate"], deltas["recall_at_10"], deltas["ndcg_at_10"]) == (0.0, 0.0, 0.0)
    assert set(deltas["checks"]) == set(CHECKS)

    # Saving an identical result again (as a re-run after a crash would) adds nothing.
    resaved = _evaluate(aml, A, save_as_baseline=True)["structuredContent"]
    assert resaved["saved_baseline"]["baseline_id"] == saved

    # Another bank never sees this bank's baseline.
    other = _evaluate(aml, C)["structuredContent"]
    assert other["baseline"] is None and saved not in json.dumps(other)


def test_a_banks_own_data_is_checked_without_labels_and_foreign_identifiers_are_caught(
    aml: AmlClient, demo_notes: dict[str, list[DemoNote]]
) -> None:
    result = _evaluate(aml, OWN, save_as_baseline=True)
    report = result["structuredContent"]
    assert report["cases"] == 3 and report["notes"] == 4
    failures = {f["case_id"]: f["failed_checks"] for f in report["code_checks"]["failures"]}
    assert failures == {"ACME-C2": ["no_foreign_identifiers"], "ACME-C3": ["typology_codes_valid"]}
    assert report["code_checks"]["pass_rate"] == round(1 / 3, 4)
    assert report["retrieval"]["available"] is False and "demo corpus" in report["retrieval"]["reason"]
    assert report["retrieval"]["recall_at_10"] is None
    foreign_account = next(s.account_id for d in demo_notes[A] for s in d.note.subjects if s.account_id)
    assert foreign_account not in json.dumps(result)

    # The drafts say which identifiers leaked only by count, never which, nor whose.
    task_id = aml.start("draft_sar_batch", {"case_ids": ["ACME-C2"]}, tenant=OWN, scope="aml:draft")
    (entry,) = aml.wait_for(task_id, "completed", tenant=OWN, scope="aml:draft")["result"][
        "structuredContent"
    ]["cases"]
    check = next(c for c in entry["checks"] if c["name"] == "no_foreign_identifiers")
    assert check["passed"] is False and foreign_account not in check["detail"] and A not in check["detail"]


def test_a_bank_with_no_notes_gets_a_tool_error(aml: AmlClient) -> None:
    result = _evaluate(aml, "empty-bank")
    assert result["isError"] is True and "no case notes" in result["content"][0]["text"]
    assert "structuredContent" not in result


def test_extra_arguments_are_refused(aml: AmlClient) -> None:
    response = aml.call("run_full_eval", {"tenant": C}, tenant=A, scope=EVAL)
    result = response.json()["result"]
    assert result["isError"] is True and "tenant" in result["content"][0]["text"]
