"""First start: the demo corpus is loaded into an empty notes store, and only into an empty one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.settings import AmlSettings
from tests.aml.sar.sample_case import NOTES


class _ZeroEmbedder:
    dims = 8
    name = "zero:8"

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.zeros((len(texts), self.dims), dtype=np.float32)


def test_the_demo_is_loaded_only_into_an_empty_store(tmp_path: Path) -> None:
    small = AmlSettings(demo_notes_per_tenant=12)
    assert load_demo_if_empty(AmlSettings(demo_notes_per_tenant=0), tmp_path) == {}
    announced: list[str] = []
    assert load_demo_if_empty(small, tmp_path, announced.append) == {
        "meridian-bank": 12,
        "harbour-trust": 12,
        "alpen-privatbank": 12,
    }
    assert announced and "12 notes per bank" in announced[0]
    assert load_demo_if_empty(small, tmp_path, announced.append) == {}
    assert len(announced) == 1
    own = tmp_path / "own"
    with SqliteNotes.open(own) as store:
        write_notes(store, "acme-bank", list(NOTES), _ZeroEmbedder())
    assert load_demo_if_empty(small, own) == {}
    with SqliteNotes.open(own) as store:
        assert store.tenants() == ["acme-bank"]
