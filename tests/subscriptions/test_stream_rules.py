"""The per-stream rules, without HTTP: bounded queues, re-authorization, owner matching."""

from __future__ import annotations

import anyio
import pytest

from aml_mcp.principal import Owner, Principal
from aml_mcp.subscriptions.events import AccessChanged, ListChanged, TaskChanged
from aml_mcp.subscriptions.filters import Accepted
from aml_mcp.subscriptions.listen import _Stream
from aml_mcp.subscriptions.policy import CredentialPolicy

ALICE = Principal("https://issuer", "alice", "bank-a", "copilot", frozenset({"aml:eval"}), expires_at=None)


def stream(
    policy: CredentialPolicy, *, queue: int = 4, tasks: dict[str, frozenset[str]] | None = None
) -> _Stream:
    send, _receive = anyio.create_memory_object_stream[object](queue)
    accepted = Accepted(lists=frozenset({"tools"}), tasks=tasks or {})
    return _Stream(ALICE, accepted, send, policy)  # type: ignore[arg-type]


def test_a_consumer_that_falls_behind_is_closed_not_buffered_without_bound() -> None:
    s = stream(CredentialPolicy(), queue=2)
    for _ in range(3):
        s.offer(ListChanged("tools"))
    assert s.close_reason == "slow_consumer"


def test_access_change_closes_a_stream_whose_credential_was_revoked() -> None:
    revoked: set[str] = set()
    s = stream(CredentialPolicy(revoked=lambda p: "revoked_token" if p.subject in revoked else None))
    s.offer(AccessChanged())
    assert s.close_reason is None
    revoked.add("alice")
    s.offer(AccessChanged())
    assert s.close_reason == "revoked_token"


def test_losing_a_needed_scope_closes_the_stream() -> None:
    granted = {"aml:eval"}
    policy = CredentialPolicy(missing_scopes=lambda p, needed: frozenset(needed - granted))
    s = stream(policy, tasks={"t1": frozenset({"aml:eval"})})
    assert s.recheck()
    granted.clear()
    assert not s.recheck()
    assert s.close_reason == "insufficient_scope"


@pytest.mark.parametrize(
    "owner",
    [
        Owner("https://issuer", "bob", "bank-a", "copilot"),
        Owner("https://issuer", "alice", "bank-b", "copilot"),
        Owner("https://issuer", "alice", "bank-a", "other"),
        Owner("https://other-issuer", "alice", "bank-a", "copilot"),
    ],
)
def test_task_events_of_another_owner_are_never_wanted(owner: Owner) -> None:
    s = stream(CredentialPolicy(), tasks={"t1": frozenset()})
    assert s.wants(TaskChanged(ALICE.owner, "t1", None, {}))
    assert not s.wants(TaskChanged(owner, "t1", None, {}))


def test_expiry_is_a_denial_even_between_events() -> None:
    now = [1000.0]
    policy = CredentialPolicy(clock=lambda: now[0])
    expiring = Principal("i", "s", "t", "c", expires_at=1010.0)
    assert policy.denial(expiring, frozenset()) is None
    now[0] = 1010.0
    assert policy.denial(expiring, frozenset()) == "token_expired"
