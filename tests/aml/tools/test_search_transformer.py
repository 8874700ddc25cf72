"""`search_aml_notes` end to end over real HTTP with the default dense half, the transformer:
a question in other words than the note's finds it, an account id still comes first, and
another bank's note is never returned."""

from __future__ import annotations

from pathlib import Path

import pytest

from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.model import CaseNote
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.transformer import SPACE_NAME, TransformerEmbedder
from aml_mcp.aml.settings import AmlSettings
from tests.aml.tools.aml_client import A, AmlClient, B
from tests.support.oauth import TestIssuer, secured_server

NOTES = {
    A: [
        (
            "A-1",
            "11 cash deposits 8.5-9.8k USD in 9 days, none over $10,000; cust asked teller abt CTR trigger",
        ),
        ("A-2", "Called the customer twice, no answer. Left a voicemail asking for a call back."),
        ("A-3", "the importer paid 410,000 usd for used textiles that customs valued at a fraction of that"),
        ("A-4", "84yo widow, savings down 120k in 2 mths after new 'carer' added to the account"),
    ],
    B: [("B-1", "Structuring: many cash lodgements just below EUR 10,000 at several branches.")],
}


def _note(note_id: str, text: str, account: str) -> CaseNote:
    return CaseNote.model_validate(
        {
            "note_id": note_id,
            "case_id": f"C-{note_id}",
            "created_at": "2024-03-01T10:00:00Z",
            "text": text,
            "subjects": [{"name": "Pat Doe", "account_id": account}],
        }
    )


@pytest.mark.slow
def test_paraphrase_identifier_and_isolation_with_the_transformer(tmp_path: Path, issuer: TestIssuer) -> None:
    model = TransformerEmbedder.load()
    with SqliteNotes.open(tmp_path) as store:
        for bank, rows in NOTES.items():
            notes = [_note(n, t, f"ACC-{bank[:3]}-{i}") for i, (n, t) in enumerate(rows)]
            write_notes(store, bank, notes, model)
            assert store.tenant(bank).vector_space() == SPACE_NAME
    settings = AmlSettings(embedder="minilm", demo_notes_per_tenant=0)  # type: ignore[arg-type]
    with secured_server(tmp_path, None, issuer=issuer, aml=settings, real_socket=True) as server:  # type: ignore[arg-type]
        client = AmlClient(server)

        def top(query: str, tenant: str = A) -> list[str]:
            response = client.call(
                "search_aml_notes", {"query": query, "top_k": 3}, tenant=tenant, scope="aml:read"
            )
            assert response.status_code == 200, response.text
            return [hit["note_id"] for hit in response.json()["result"]["structuredContent"]["results"]]

        assert top("customer splitting cash to avoid the currency transaction report")[0] == "A-1"
        assert top("elderly client exploited by her caregiver")[0] == "A-4"
        assert top("goods bought from abroad at inflated prices")[0] == "A-3"
        assert top("ACC-mer-1")[0] == "A-2"
        everything = top("cash deposits below the threshold") + top("cash deposits below the threshold", B)
        assert "B-1" not in everything[:3] and set(everything[3:]) <= {"B-1"}
