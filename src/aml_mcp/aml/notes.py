"""Case notes and tenants: the shape a bank's data must have before anything stores it.

A note is validated in full at the door (pydantic, strict about unknown fields) so that the
store, the search and the SAR drafter downstream can trust every field without re-checking.
Tenant ids are validated here too, because they end up in file names and SQL parameters and a
malformed one must be refused before it reaches either.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field, field_validator

TENANT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
"""Lower-case, short, no separators that could be confused in paths or logs."""

_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$"
_NOT_ALNUM = re.compile(r"[\W_]+")


class InvalidTenantError(ValueError):
    """A tenant id that does not match `TENANT_PATTERN`."""


def validate_tenant(tenant: str) -> str:
    """Return `tenant` unchanged if it is a well-formed tenant id, else raise `InvalidTenantError`."""
    if not isinstance(tenant, str) or not TENANT_PATTERN.fullmatch(tenant):
        raise InvalidTenantError(
            f"invalid tenant id {tenant!r}: use 1-64 characters of a-z, 0-9, '_', '.', '-' "
            "starting with a letter or digit"
        )
    return tenant


class Subject(BaseModel):
    """A person or entity a case is about; any field may be unknown (the SAR drafter asks for it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    name: str = Field(min_length=1, max_length=200)
    account_id: str | None = Field(default=None, min_length=1, max_length=64)
    role: str | None = Field(default=None, max_length=64)
    date_of_birth: date | None = None


class CaseNote(BaseModel):
    """One analyst note as a bank delivers it (one JSONL row)."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    note_id: str = Field(pattern=_ID_PATTERN)
    case_id: str = Field(pattern=_ID_PATTERN)
    created_at: datetime
    text: str = Field(min_length=1, max_length=50_000)
    author: str | None = Field(default=None, max_length=200)
    subjects: tuple[Subject, ...] = ()
    typologies: tuple[str, ...] = ()
    amount: Decimal | None = Field(default=None, ge=0, max_digits=20, decimal_places=2)
    currency: str | None = Field(default=None, pattern=r"^[A-Z]{3}$")
    jurisdictions: tuple[str, ...] = ()
    counterparties: tuple[str, ...] = ()

    @field_validator("created_at")
    @classmethod
    def _aware_utc(cls, value: datetime) -> datetime:
        """Naive timestamps are read as UTC so date filters compare like with like."""
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        try:
            return value.astimezone(UTC)
        except OverflowError:  # 9999-12-31T23:59:59-14:00 is in year 10000 in UTC
            raise ValueError("is out of range once converted to UTC (years 1-9999)") from None

    @field_validator("typologies", "jurisdictions", "counterparties")
    @classmethod
    def _non_empty_items(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        cleaned = tuple(v.strip() for v in values)
        if any(not v or len(v) > 200 for v in cleaned):
            raise ValueError("items must be non-empty strings of at most 200 characters")
        return cleaned

    @field_validator("typologies")
    @classmethod
    def _normalise_typologies(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        """Typology codes compare case-insensitively; store one spelling."""
        return tuple(dict.fromkeys(normalise_typology(v) for v in values))


def normalise_typology(value: str) -> str:
    """`"Trade-Based Laundering"` and `"trade_based_laundering"` are the same typology code."""
    return re.sub(r"[^a-z0-9]+", "_", value.strip().lower()).strip("_")


def normalise_identifier(value: str) -> str:
    """Identifiers compare case- and spacing-insensitively: `"acc 00123"` finds `"ACC-00123"`."""
    return _NOT_ALNUM.sub("", value.casefold())


def normalise_name(value: str) -> str:
    """Names compare on lower-cased words: `"SMITH,  John"` is not `"John Smith"`, but case is free."""
    return _NOT_ALNUM.sub(" ", value.casefold()).strip()
