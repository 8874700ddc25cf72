"""Every `TaskStore` behaviour, on SQLite and on PostgreSQL alike.

Owner-filtered lookups (every field, no joined-string collisions), a TTL that never slides, CAS on
`version`, terminal rows that never change (and a trigger behind the store that refuses even a
hand-written statement), one winner in a complete-vs-cancel race, leases by holder, claims, the
quota counted in the create transaction, sweeping in batches, and idempotency keys (a repeated
create answers the task its key names, per owner, until it expires; racing creates store one).
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

import anyio
import psycopg
import pytest

from aml_mcp.tasks.model import TaskStatus
from aml_mcp.tasks.storage import (
    COLUMNS,
    Change,
    CreateRateExceeded,
    QuotaExceeded,
    TaskQuota,
    UnstorableTask,
)
from tests.contract.conftest import Backend
from tests.tasks.factories import ISSUER, owner, principal_matrix, record

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000_000


async def test_a_created_task_round_trips(backend: Backend) -> None:
    store = backend.store
    task = record(
        owner(),
        now=NOW,
        input_responses={"k": {"action": "accept"}},
        status_message="half way \x00 there",
        arguments={"text": "nul \x00 and ünïcode"},
    )
    await store.create(task)
    assert await store.find(task.task_id, task.owner, NOW) == task
    assert await store.scope_of(task.task_id, task.owner, NOW) == "cases:read"


async def test_every_owner_field_is_part_of_the_lookup(backend: Backend) -> None:
    store = backend.store
    mine = owner()
    task = record(mine, now=NOW)
    await store.create(task)
    for field in ("issuer", "subject", "tenant", "client_id"):
        other = replace(mine, **{field: getattr(mine, field) + "x"})
        assert await store.find(task.task_id, other, NOW) is None
        assert await store.scope_of(task.task_id, other, NOW) is None
        assert not await store.transition(
            task.task_id, other, expected_version=1, change=Change(status_message="x"), now_ms=NOW
        )
    assert await store.find(task.task_id, mine, NOW) == task


async def test_joined_string_collisions_stay_apart(backend: Backend) -> None:
    store = backend.store
    first, second, third, fourth = principal_matrix()[-4:]
    task = record(first, now=NOW)
    await store.create(task)
    assert await store.find(task.task_id, second, NOW) is None
    other = record(third, now=NOW)  # its tenant holds a NUL character
    await store.create(other)
    assert await store.find(other.task_id, fourth, NOW) is None
    assert await store.find(other.task_id, third, NOW) == other


async def test_expired_tasks_are_invisible_and_ttl_never_slides(backend: Backend) -> None:
    store = backend.store
    task = record(owner(), now=NOW, ttl_ms=1000)
    await store.create(task)
    for moment in (NOW, NOW + 500, NOW + 999):
        found = await store.find(task.task_id, task.owner, moment)
        assert found is not None and found.expires_at == NOW + 1000
    assert await store.transition(
        task.task_id, task.owner, expected_version=1, change=Change(status_message="m"), now_ms=NOW + 900
    )
    assert await store.find(task.task_id, task.owner, NOW + 1000) is None
    assert await store.scope_of(task.task_id, task.owner, NOW + 1000) is None
    assert not await store.transition(
        task.task_id, task.owner, expected_version=2, change=Change(status_message="n"), now_ms=NOW + 1000
    )


async def test_compare_and_set_needs_the_current_version(backend: Backend) -> None:
    store = backend.store
    task = record(owner(), now=NOW)
    await store.create(task)
    change = Change(status_message="first")
    updated = await store.transition(
        task.task_id, task.owner, expected_version=1, change=change, now_ms=NOW + 5
    )
    assert updated is not None and updated.version == 2 and updated.status_message == "first"
    assert updated == await store.find(task.task_id, task.owner, NOW + 5)
    assert not await store.transition(
        task.task_id, task.owner, expected_version=1, change=change, now_ms=NOW + 6
    )
    found = await store.find(task.task_id, task.owner, NOW + 6)
    assert found is not None and found.version == 2 and found.updated_at == NOW + 5


async def test_last_updated_at_never_goes_back(backend: Backend) -> None:
    store = backend.store
    task = record(owner(), now=NOW)
    await store.create(task)
    assert await store.transition(
        task.task_id, task.owner, expected_version=1, change=Change(status_message="a"), now_ms=NOW + 50
    )
    later = await store.transition(
        task.task_id, task.owner, expected_version=2, change=Change(status_message="b"), now_ms=NOW + 10
    )
    assert later is not None and later.updated_at == NOW + 50


async def test_untouched_changes_keep_last_updated_at(backend: Backend) -> None:
    store = backend.store
    task = record(owner(), now=NOW)
    await store.create(task)
    assert await store.transition(
        task.task_id,
        task.owner,
        expected_version=1,
        change=Change(cancel_requested=True, touch=False),
        now_ms=NOW + 50,
    )
    found = await store.find(task.task_id, task.owner, NOW + 60)
    assert found is not None and found.cancel_requested and found.updated_at == NOW


async def test_a_terminal_task_never_changes(backend: Backend) -> None:
    store = backend.store
    task = record(owner(), now=NOW)
    await store.create(task)
    done = Change(status=TaskStatus.COMPLETED, result={"content": []})
    assert await store.transition(task.task_id, task.owner, expected_version=1, change=done, now_ms=NOW + 1)
    final = await store.find(task.task_id, task.owner, NOW + 2)
    assert final is not None and final.status is TaskStatus.COMPLETED and final.lease_holder is None
    for change in (
        Change(status=TaskStatus.CANCELLED),
        Change(status=TaskStatus.WORKING),
        Change(status_message="late"),
        Change(cancel_requested=True, touch=False),
    ):
        assert not await store.transition(
            task.task_id, task.owner, expected_version=2, change=change, now_ms=NOW + 3
        )
    assert (await store.renew("runner-1", NOW + 99_999, NOW + 3)).held == frozenset()
    assert await store.claim("runner-2", NOW + 10**9, NOW + 10**9 + 1, 10) == []
    assert await store.find(task.task_id, task.owner, NOW + 4) == final
    # The trigger is the second wall: even a hand-written statement cannot touch the row.
    with pytest.raises(backend.integrity_error, match="terminal task never changes"):
        await backend.execute("UPDATE tasks SET status = 'working' WHERE task_id = ?", (task.task_id,))
    assert await store.find(task.task_id, task.owner, NOW + 4) == final


@pytest.mark.parametrize(
    "assignment",
    ["owner_subject = 'mallory'", "owner_tenant = 'bank-z'", "expires_at = expires_at + 1", "version = 0"],
)
async def test_identity_owner_and_expiry_are_fixed_by_trigger(backend: Backend, assignment: str) -> None:
    store = backend.store
    task = record(owner(), now=NOW)
    await store.create(task)
    with pytest.raises(backend.integrity_error, match="never change"):
        await backend.execute(f"UPDATE tasks SET {assignment} WHERE task_id = ?", (task.task_id,))  # noqa: S608
    assert await store.find(task.task_id, task.owner, NOW) == task


async def test_completion_racing_cancellation_has_one_winner(backend: Backend) -> None:
    store = backend.store
    for _ in range(20):
        task = record(owner(), now=NOW)
        await store.create(task)
        outcomes: dict[str, bool] = {}

        async def attempt(
            name: str, change: Change, holder: str | None, current: Any = task, outcomes: Any = outcomes
        ) -> None:
            updated = await store.transition(
                current.task_id,
                current.owner,
                expected_version=1,
                change=change,
                now_ms=NOW + 1,
                holder=holder,
            )
            outcomes[name] = updated is not None

        async with anyio.create_task_group() as group:
            group.start_soon(
                attempt, "completed", Change(status=TaskStatus.COMPLETED, result={"content": []}), "runner-1"
            )
            group.start_soon(attempt, "cancelled", Change(status=TaskStatus.CANCELLED), None)
        assert sorted(outcomes.values()) == [False, True]
        final = await store.find(task.task_id, task.owner, NOW + 2)
        winner = next(name for name, won in outcomes.items() if won)
        assert final is not None and final.status.value == winner


async def test_holder_condition_and_lease_free_condition(backend: Backend) -> None:
    store = backend.store
    task = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    await store.create(task)
    message = Change(status_message="m")
    assert not await store.transition(
        task.task_id, task.owner, expected_version=1, change=message, now_ms=NOW, holder="runner-2"
    )
    assert not await store.transition(
        task.task_id, task.owner, expected_version=1, change=message, now_ms=NOW + 999, lease_free=True
    )
    assert await store.transition(
        task.task_id, task.owner, expected_version=1, change=message, now_ms=NOW + 1000, lease_free=True
    )


async def test_leases_renew_claim_and_release(backend: Backend) -> None:
    store = backend.store
    mine = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    cancelled = record(owner(), now=NOW, holder="runner-1", lease_ms=1000, cancel_requested=True)
    theirs = record(owner(), now=NOW, holder="runner-2", lease_ms=1000)
    for task in (mine, cancelled, theirs):
        await store.create(task)
    report = await store.renew("runner-1", NOW + 5000, NOW + 500)
    assert report.held == {mine.task_id, cancelled.task_id}
    assert report.cancel_requested == {cancelled.task_id}
    # runner-2 stopped heartbeating: its task is claimable once the lease lapses, runner-1's are not.
    claimed = await store.claim("runner-3", NOW + 1000, NOW + 9000, 10)
    assert [task.task_id for task in claimed] == [theirs.task_id]
    assert claimed[0].lease_holder == "runner-3" and claimed[0].attempts == 2
    assert await store.claim("runner-4", NOW + 1000, NOW + 9000, 10) == []
    await store.release("runner-1")
    reclaimed = await store.claim("runner-4", NOW + 1001, NOW + 9000, 10)
    assert {task.task_id for task in reclaimed} == {mine.task_id, cancelled.task_id}
    assert (await store.renew("runner-1", NOW + 9999, NOW + 1002)).held == frozenset()


async def test_a_claim_takes_at_most_its_limit_oldest_first(backend: Backend) -> None:
    store = backend.store
    tasks = [record(owner(), now=NOW + i, holder=None) for i in range(7)]
    for task in reversed(tasks):
        await store.create(task)
    first = await store.claim("runner-1", NOW + 100, NOW + 9000, 3)
    assert {task.task_id for task in first} == {task.task_id for task in tasks[:3]}
    second = await store.claim("runner-2", NOW + 100, NOW + 9000, 10)
    assert {task.task_id for task in second} == {task.task_id for task in tasks[3:]}


async def test_a_heartbeat_renews_only_the_tasks_it_names(backend: Backend) -> None:
    store = backend.store
    live = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    dead = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    for task in (live, dead):
        await store.create(task)
    report = await store.renew("runner-1", NOW + 5000, NOW + 500, task_ids=[live.task_id])
    assert report.held == {live.task_id}
    claimed = await store.claim("runner-2", NOW + 1000, NOW + 9000, 10)
    assert [task.task_id for task in claimed] == [dead.task_id]  # its lease lapsed: nobody renewed it


async def test_a_graceful_release_counts_a_handover_only_for_the_runs_it_stopped(backend: Backend) -> None:
    store = backend.store
    stopped = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    unstarted = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    for task in (stopped, unstarted):
        await store.create(task)
    await store.release("runner-1", [stopped.task_id])
    claimed = {task.task_id: task for task in await store.claim("runner-2", NOW + 1, NOW + 9000, 10)}
    assert (claimed[stopped.task_id].attempts, claimed[stopped.task_id].handovers) == (2, 1)
    assert claimed[stopped.task_id].counted_attempts == 1
    assert (claimed[unstarted.task_id].attempts, claimed[unstarted.task_id].handovers) == (2, 0)


async def test_an_abandoned_task_is_held_by_nobody_and_claimed_at_once(backend: Backend) -> None:
    store = backend.store
    task = record(owner(), now=NOW, holder="runner-1", lease_ms=60_000)
    await store.create(task)
    await store.abandon(task.task_id, "runner-2")  # not its holder: nothing happens
    assert await store.claim("runner-3", NOW + 1, NOW + 9000, 10) == []
    await store.abandon(task.task_id, "runner-1")
    found = await store.find(task.task_id, task.owner, NOW + 1)
    assert found is not None and found.lease_holder is None and found.status is TaskStatus.WORKING
    [claimed] = await store.claim("runner-3", NOW + 1, NOW + 9000, 10)
    assert claimed.task_id == task.task_id and claimed.attempts == 2 and claimed.handovers == 0


async def test_a_claim_skips_the_tasks_the_claimer_still_runs(backend: Backend) -> None:
    store = backend.store
    mine = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    await store.create(mine)
    assert await store.claim("runner-1", NOW + 2000, NOW + 9000, 10, exclude=[mine.task_id]) == []
    assert [t.task_id for t in await store.claim("runner-1", NOW + 2000, NOW + 9000, 10)] == [mine.task_id]


async def test_the_quota_counts_unfinished_unexpired_tasks_by_principal_and_tenant(backend: Backend) -> None:
    store = backend.store
    quota = TaskQuota(active_per_principal=2, active_per_tenant=3)
    alice, alice_elsewhere, bob = owner("alice"), owner("alice", client_id="client-2"), owner("bob")
    await store.create(record(alice, now=NOW), quota)
    await store.create(record(alice_elsewhere, now=NOW), quota)
    with pytest.raises(QuotaExceeded) as caught:
        await store.create(record(alice, now=NOW), quota)
    assert (caught.value.per, caught.value.limit) == ("principal", 2)
    await store.create(record(alice, now=NOW, status=TaskStatus.CANCELLED, holder=None), None)
    await store.create(record(bob, now=NOW - 10_000, ttl_ms=5_000), None)  # expired: not counted
    await store.create(record(bob, now=NOW), quota)
    with pytest.raises(QuotaExceeded) as caught:
        await store.create(record(bob, now=NOW), quota)
    assert caught.value.per == "tenant"
    await store.create(record(owner("carol", tenant="bank-b"), now=NOW), quota)
    # Every nullable column empty, through the quota path too.
    bare = record(owner("dave", tenant="bank-c"), now=NOW, holder=None, scope=None)
    await store.create(bare, quota)
    assert await store.find(bare.task_id, bare.owner, NOW) == bare


async def test_the_quota_counts_each_bank_alone_whatever_its_names_hold(backend: Backend) -> None:
    # A create under a quota locks its (issuer, tenant) first: names holding U+0000 (which a token's
    # claims may, and PostgreSQL `TEXT` cannot) or a backslash, and pairs that join to the same
    # text, are each their own bank and get their own room.
    store = backend.store
    quota = TaskQuota(active_per_principal=10, active_per_tenant=1)
    banks = [
        owner(issuer="https://a", tenant="bc"),
        owner(issuer="https://ab", tenant="c"),
        owner(issuer="https://a", tenant="b\x00c"),
        owner(issuer="https://a\x00", tenant="bc"),
        owner(issuer="https://a\\", tenant="0bc"),
        owner(issuer="https://a", tenant="\\0bc"),
    ]
    for bank in banks:
        await store.create(record(bank, now=NOW), quota)
    for bank in banks:
        with pytest.raises(QuotaExceeded) as caught:
            await store.create(record(bank, now=NOW), quota)
        assert caught.value.per == "tenant"
    assert await backend.count() == len(banks)


async def test_concurrent_creates_never_overshoot_the_quota(backend: Backend) -> None:
    store = backend.store
    quota = TaskQuota(active_per_principal=1000, active_per_tenant=5)
    accepted: list[bool] = []

    async def create(i: int) -> None:
        try:
            await store.create(record(owner(subject=f"s{i}"), now=NOW), quota)
        except QuotaExceeded:
            accepted.append(False)
        else:
            accepted.append(True)

    async with anyio.create_task_group() as group:
        for i in range(30):
            group.start_soon(create, i)
    assert accepted.count(True) == 5
    assert await backend.count() == 5


async def test_sweep_deletes_only_expired_tasks_in_batches(backend: Backend) -> None:
    store = backend.store
    short = [record(owner(), now=NOW, ttl_ms=100) for _ in range(5)]
    long = record(owner(), now=NOW, ttl_ms=10_000)
    for task in [*short, long]:
        await store.create(task)
    assert await store.sweep(NOW + 99, 100) == 0
    assert await store.sweep(NOW + 100, 3) == 3
    assert await store.sweep(NOW + 100, 3) == 2
    assert await store.find(long.task_id, long.owner, NOW + 100) == long


async def test_concurrent_creates_are_all_durable(backend: Backend) -> None:
    store = backend.store
    tasks = [record(owner(subject=f"s{i}"), now=NOW) for i in range(100)]
    async with anyio.create_task_group() as group:
        for task in tasks:
            group.start_soon(store.create, task)
    # A fresh connection (as after a restart) sees every acknowledged create.
    assert await backend.count() == 100


def rate(limit: int, window_ms: int = 1000) -> TaskQuota:
    """A quota whose only binding limit is the create window."""
    return TaskQuota(
        active_per_principal=1000, active_per_tenant=1000, created_per_principal=limit, window_ms=window_ms
    )


async def test_the_create_window_counts_every_recent_create_by_principal(backend: Backend) -> None:
    store = backend.store
    quota = rate(3)
    alice, alice_elsewhere, bob = owner("alice"), owner("alice", client_id="client-2"), owner("bob")
    # History, written past the quota: finished, expired and running tasks all count; one created a
    # whole window ago no longer does.
    await store.create(record(alice, now=NOW - 1000), None)
    await store.create(record(alice, now=NOW - 900, status=TaskStatus.CANCELLED, holder=None), None)
    await store.create(record(alice, now=NOW - 800, ttl_ms=100), None)  # expired at NOW - 700
    await store.create(record(alice_elsewhere, now=NOW - 10), None)  # same principal, other client
    before = await backend.count()
    with pytest.raises(CreateRateExceeded) as caught:
        await store.create(record(alice, now=NOW), quota)
    refused = caught.value
    assert isinstance(refused, QuotaExceeded)  # refused like every quota
    assert (refused.per, refused.limit, refused.window_ms) == ("principal", 3, 1000)
    assert refused.retry_after_ms == 100  # when the create at NOW - 900 leaves the window
    assert await backend.count() == before  # nothing stored

    await store.create(record(bob, now=NOW), quota)  # a colleague at the same bank is not affected
    await store.create(record(owner("alice", tenant="bank-b"), now=NOW), quota)  # nor another tenant
    await store.create(record(owner("alice", issuer=ISSUER + "/other"), now=NOW), quota)  # nor issuer
    with pytest.raises(CreateRateExceeded):
        await store.create(record(alice, now=NOW + 99), quota)
    await store.create(record(alice, now=NOW + 100), quota)  # exactly when the hint said


async def test_the_create_window_hint_names_when_a_slot_frees_even_past_the_limit(backend: Backend) -> None:
    store = backend.store
    alice = owner("alice")
    for age in (900, 800, 700, 600, 500):  # five creates, more than the limit of three
        await store.create(record(alice, now=NOW - age), None)
    with pytest.raises(CreateRateExceeded) as caught:
        await store.create(record(alice, now=NOW), rate(3))
    # Room comes back when only two remain: once the third newest (NOW - 700) leaves.
    assert caught.value.retry_after_ms == 300
    # An unlimited quota (the active caps only) ignores the window altogether.
    await store.create(record(alice, now=NOW), TaskQuota(active_per_principal=1000, active_per_tenant=1000))


async def test_concurrent_creates_never_overshoot_the_create_window(backend: Backend) -> None:
    store = backend.store
    accepted: list[bool] = []

    async def create(i: int) -> None:
        try:
            await store.create(record(owner(client_id=f"c{i}"), now=NOW + i), rate(5, window_ms=60_000))
        except CreateRateExceeded:
            accepted.append(False)
        else:
            accepted.append(True)

    async with anyio.create_task_group() as group:
        for i in range(30):
            group.start_soon(create, i)
    assert accepted.count(True) == 5
    assert await backend.count() == 5


async def test_sweep_keeps_expired_tasks_the_create_window_still_counts(backend: Backend) -> None:
    store = backend.store
    alice = owner("alice")
    old = record(alice, now=NOW - 5000, ttl_ms=100)
    recent = [record(alice, now=NOW - 400 + i, ttl_ms=100) for i in range(3)]  # expired, still counted
    for task in [old, *recent]:
        await store.create(task)
    assert await store.sweep(NOW, 100, keep_created_after_ms=NOW - 1000) == 1  # only the old one
    assert [await store.find(task.task_id, alice, NOW) for task in recent] == [None] * 3  # invisible
    with pytest.raises(CreateRateExceeded):
        await store.create(record(alice, now=NOW), rate(3))  # the evidence survived the sweep
    assert await store.sweep(NOW + 700, 100, keep_created_after_ms=NOW - 300) == 3
    await store.create(record(alice, now=NOW + 700), rate(3))


# -- idempotency keys: a retried create names the task the first attempt made ---------------------


async def test_a_create_repeated_with_its_key_answers_the_first_task_and_stores_nothing(
    backend: Backend,
) -> None:
    store = backend.store
    first = record(owner(), now=NOW)
    assert await store.create(first, idempotency_key="k-1") == first
    for moment in (NOW + 1, NOW + 2):
        again = record(owner(), now=moment)  # a retry: a new id, the same key
        assert await store.create(again, idempotency_key="k-1") == first
        assert await store.find(again.task_id, again.owner, moment) is None
    assert await backend.count() == 1
    other = record(owner(), now=NOW + 3)
    assert await store.create(other, idempotency_key="k-2") == other  # another key, another task
    assert await store.create(record(owner(), now=NOW + 4)) is not None  # no key: always a new task
    assert await backend.count() == 3


async def test_a_key_names_a_task_of_one_owner_only(backend: Backend) -> None:
    store = backend.store
    mine = owner()
    await store.create(record(mine, now=NOW), idempotency_key="shared-key")
    for field in ("issuer", "subject", "tenant", "client_id"):
        theirs = record(replace(mine, **{field: getattr(mine, field) + "x"}), now=NOW)
        assert await store.create(theirs, idempotency_key="shared-key") == theirs
    assert await backend.count() == 5


async def test_a_key_answers_its_task_when_finished_until_it_expires(backend: Backend) -> None:
    store = backend.store
    first = record(owner(), now=NOW, ttl_ms=1000)
    await store.create(first, idempotency_key="k")
    done = await store.transition(
        first.task_id,
        first.owner,
        expected_version=1,
        change=Change(status=TaskStatus.COMPLETED, result={"content": []}),
        now_ms=NOW + 10,
    )
    assert done is not None
    assert await store.create(record(owner(), now=NOW + 999), idempotency_key="k") == done
    # Expired (not yet swept): the key names a new task, and the old row is gone with its key.
    later = record(owner(), now=NOW + 1000)
    assert await store.create(later, idempotency_key="k") == later
    assert await backend.count() == 1
    assert await store.find(later.task_id, later.owner, NOW + 1000) == later


async def test_a_repeated_create_counts_against_no_quota(backend: Backend) -> None:
    store = backend.store
    quota = TaskQuota(active_per_principal=1, active_per_tenant=1, created_per_principal=1)
    first = record(owner(), now=NOW, holder=None)
    await store.create(first, quota, idempotency_key="k")
    assert await store.create(record(owner(), now=NOW + 1, holder=None), quota, idempotency_key="k") == first
    with pytest.raises(QuotaExceeded):  # a new key is a new create: the quota still holds
        await store.create(record(owner(), now=NOW + 2, holder=None), quota, idempotency_key="k2")
    assert await backend.count() == 1


async def test_creates_racing_with_one_key_store_one_task(backend: Backend) -> None:
    store = backend.store
    quotas: list[TaskQuota | None] = [None, TaskQuota(active_per_principal=100, active_per_tenant=100)]

    async def create(i: int, quota: TaskQuota | None, key: str, answers: list[str]) -> None:
        held = await store.create(record(owner(), now=NOW + i, holder=None), quota, idempotency_key=key)
        answers.append(held.task_id)

    for round_, quota in enumerate(quotas):
        answers: list[str] = []
        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(create, i, quota, f"race-{round_}", answers)
        assert len(answers) == 8 and len(set(answers)) == 1, answers
    assert await backend.count() == 2


async def test_an_unstorable_key_is_refused_before_anything_is_sent(backend: Backend) -> None:
    with pytest.raises(UnstorableTask):
        await backend.store.create(record(owner(), now=NOW), idempotency_key="nul \x00 key")
    assert await backend.count() == 0


async def test_a_task_keeps_its_key_whatever_a_statement_says(backend: Backend) -> None:
    store = backend.store
    task = record(owner(), now=NOW)
    await store.create(task, idempotency_key="k")
    with pytest.raises(backend.integrity_error, match="never change"):
        await backend.execute("UPDATE tasks SET idempotency_key = 'other' WHERE task_id = ?", (task.task_id,))
    # Unique per owner, behind the store's own lookup: a hand-written copy under another id is refused.
    copied = COLUMNS.replace("task_id,", "'copy' || task_id,", 1)
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError), match=r"(?i)unique|duplicate"):
        await backend.execute(
            f"INSERT INTO tasks ({COLUMNS}, idempotency_key)"  # noqa: S608
            f" SELECT {copied}, idempotency_key FROM tasks WHERE task_id = ?",
            (task.task_id,),
        )
    assert await store.create(record(owner(), now=NOW + 1), idempotency_key="k") == task
    assert await backend.count() == 1
