"""`AnonymousRefusals` on its own, with event times chosen by the test (no clock, no waiting)."""

from __future__ import annotations

from aml_mcp.audit import AuditEvent, Decision
from aml_mcp.audit.anonymous import AnonymousRefusals
from aml_mcp.principal import Principal
from tests.support.audit_trail import event_count

ALICE = Principal("https://id.example", "alice", "bank-a", "copilot", token_id="j")


def _anonymous(at: float, target: str = "t", reason: str = "no_token") -> AuditEvent:
    return AuditEvent(decision=Decision.DENY, reason=reason, method="tools/call", target=target, time=at)


def _count(events: list[AuditEvent]) -> int:
    return sum(event_count({"detail": e.detail}) for e in events)


def test_identical_refusals_become_the_first_plus_one_counted_summary_per_window() -> None:
    folding = AnonymousRefusals(window_seconds=1.0, max_distinct=8)
    written = folding.take([_anonymous(100 + n / 1000) for n in range(1000)], now=100.5)
    assert len(written) == 1 and written[0].detail is None  # the first, at once
    written += folding.take([], now=101.0)
    assert len(written) == 2
    summary = written[1]
    assert (summary.reason, summary.method, summary.target) == ("no_token", "tools/call", "t")
    assert summary.detail == {
        "aggregated": {
            "count": 999,
            "first": "1970-01-01T00:01:40.001+00:00",
            "last": "1970-01-01T00:01:40.999+00:00",
        }
    }
    assert _count(written) == 1000 and folding.folded == 999


def test_a_steady_flood_costs_two_records_per_window() -> None:
    folding = AnonymousRefusals(window_seconds=1.0, max_distinct=8)
    written: list[AuditEvent] = []
    for tick in range(100):  # 10 s of 100 refusals a second, flushed every 0.1 s
        at = 100 + tick / 10
        written += folding.take([_anonymous(at + n / 1000) for n in range(10)], now=at + 0.1)
    written += folding.drain()
    assert len(written) <= 2 * 10 + 2 and _count(written) == 1000


def test_varying_the_target_folds_into_one_summary_per_reason_beyond_the_limit() -> None:
    folding = AnonymousRefusals(window_seconds=1.0, max_distinct=8)
    events = [_anonymous(100 + n / 1000, target=f"tool-{n}") for n in range(500)]
    events += [_anonymous(100.6 + n / 1000, target=f"x{n}", reason="bad_signature") for n in range(50)]
    written = folding.take(events, now=100.9) + folding.drain()
    assert len(written) == 8 + 2
    assert [e.target for e in written[:8]] == [f"tool-{n}" for n in range(8)]
    overflow = {e.reason: e for e in written[8:]}
    assert overflow["no_token"].target is None and overflow["no_token"].method is None
    assert overflow["no_token"].detail == {
        "aggregated": {
            "count": 492,
            "first": "1970-01-01T00:01:40.008+00:00",
            "last": "1970-01-01T00:01:40.499+00:00",
            "distinct": 492,
        }
    }
    assert _count(written) == 550


def test_allowed_calls_and_verified_refusals_are_never_folded() -> None:
    folding = AnonymousRefusals(window_seconds=60.0, max_distinct=1)
    allowed = [AuditEvent.about(ALICE, decision=Decision.ALLOW, reason="ok", target="t") for _ in range(50)]
    refused = [
        AuditEvent.about(ALICE, decision=Decision.DENY, reason="insufficient_scope", target="t")
        for _ in range(50)
    ]
    assert folding.take([*allowed, *refused], now=0.0) == [*allowed, *refused]
    assert folding.drain() == [] and folding.folded == 0


def test_a_zero_window_records_every_refusal() -> None:
    folding = AnonymousRefusals(window_seconds=0, max_distinct=1)
    events = [_anonymous(100.0) for _ in range(20)]
    assert folding.take(events, now=100.0) == events
