"""Building task records and principals for tests."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from aml_mcp.principal import Owner, Principal
from aml_mcp.tasks.model import TaskRecord, TaskStatus, new_task_id

ISSUER = "https://issuer.example"
HOUR = 3_600_000


def owner(
    subject: str = "alice", tenant: str = "bank-a", client_id: str = "client-1", issuer: str = ISSUER
) -> Owner:
    return Owner(issuer=issuer, subject=subject, tenant=tenant, client_id=client_id)


def principal_of(who: Owner, scopes: frozenset[str] = frozenset()) -> Principal:
    return Principal(
        issuer=who.issuer, subject=who.subject, tenant=who.tenant, client_id=who.client_id, scopes=scopes
    )


def record(
    who: Owner,
    *,
    now: int,
    ttl_ms: int = HOUR,
    status: TaskStatus = TaskStatus.WORKING,
    holder: str | None = "runner-1",
    lease_ms: int = 10_000,
    **fields: Any,
) -> TaskRecord:
    return TaskRecord(
        task_id=fields.pop("task_id", new_task_id()),
        owner=who,
        tool=fields.pop("tool", "tool"),
        scope=fields.pop("scope", "cases:read"),
        arguments=fields.pop("arguments", {"x": 1}),
        client_capabilities=fields.pop("client_capabilities", {}),
        status=status,
        created_at=now,
        updated_at=now,
        ttl_ms=ttl_ms,
        expires_at=now + ttl_ms,
        lease_holder=holder,
        lease_expires_at=now + lease_ms if holder is not None else None,
        attempts=fields.pop("attempts", 1),
        **fields,
    )


def principal_matrix() -> list[Owner]:
    """3 subjects x 3 tenants x 3 clients, plus owners built to collide if fields were ever joined.

    `("x", "y|z")` and `("x|y", "z")` are the same string once joined with `|` as `client|sub`;
    the tab/colon/NUL pair does the same for other separators and for the issuer and tenant.
    """
    owners = [
        owner(subject=s, tenant=t, client_id=c)
        for s, t, c in itertools.product(
            ("alice", "bob", "carol"), ("bank-a", "bank-b", "bank-c"), ("c1", "c2", "c3")
        )
    ]
    owners.append(owner(subject="y|z", tenant="bank-a", client_id="x"))
    owners.append(owner(subject="z", tenant="bank-a", client_id="x|y"))
    owners.append(Owner(issuer=ISSUER + ":bank", subject="a\tb", tenant="c\x00d", client_id="e/f"))
    owners.append(Owner(issuer=ISSUER, subject="bank:a\tb", tenant="c", client_id="d\x00e/f"))
    return owners


def state(task: TaskRecord | None) -> TaskRecord | None:
    """A task without its lease expiry, which heartbeats move while nothing else changes."""
    return replace(task, lease_expires_at=None) if task is not None else None
