"""A `Drafter` plugged in through `aml.drafter` that takes 40 ms per case, so a run lasts long enough
to be cancelled mid-way, and that counts its calls, so a test can see drafting stop."""

from __future__ import annotations

import threading
import time

from aml_mcp.aml.sar.draft import SarDraft, TemplateDrafter
from aml_mcp.aml.sar.facts import CaseFile
from aml_mcp.aml.sar.questions import AnalystFacts

DELAY_S = 0.04
CALLS: list[str] = []
_LOCK = threading.Lock()


class SlowDrafter:
    name = "slow"

    def __init__(self) -> None:
        self._inner = TemplateDrafter()

    def draft(self, case: CaseFile, facts: AnalystFacts) -> SarDraft:
        time.sleep(DELAY_S)
        with _LOCK:
            CALLS.append(case.case_id)
        return self._inner.draft(case, facts).model_copy(update={"drafter": self.name})
