"""A deterministic synthetic AML corpus for three banks, and the labelled queries that grade search.

Why synthetic and seeded: the server must be useful out of the box and the search benchmark must
be reproducible, with no real customer data anywhere. The same `(seed, notes_per_tenant)` always
yields the same notes, ids and queries.

What it contains: 13 typologies (see `demo_typologies`), each case with 2-6 analyst notes worded
from many templates and synonyms, subjects with account ids in each bank's own format, industries,
jurisdictions, amounts and counterparties. A few cases deliberately lack a fact a SAR needs (a
subject's date of birth, or which of two accounts a subject holds) so the SAR drafter has
something to ask the analyst.

The labelled set has two kinds of query: paraphrases of a behaviour (graded: 2 for notes of that
behaviour, 1 for notes of the same typology) and exact identifiers (account ids, names, case ids,
relevance 2 for every note that carries the identifier).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from aml_mcp.aml.demo.typologies import INDUSTRIES, OCCUPATIONS, TYPOLOGIES, Typology, Variant
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.model import CaseNote, Subject
from aml_mcp.aml.notes.storage import NotesBackend
from aml_mcp.aml.search.embeddings import Embedder

DEFAULT_SEED = 20260804
DEFAULT_NOTES_PER_TENANT = 2000

BankProgress = Callable[[str, int, int, int], None]
"""Told `(bank, notes written, banks done, banks in all)` after each demo bank is written."""
"""What `serve` loads on first start: enough to be useful, seconds to build."""
MAX_NOTES_PER_TENANT = 100_000


@dataclass(frozen=True, slots=True)
class DemoTenant:
    name: str
    prefix: str
    home: str
    currency: str
    threshold: str
    account_style: str
    """`us` (0042-318-77651), `iban_gb` or `iban_ch` (grouped by four, with spaces)."""


TENANTS: tuple[DemoTenant, ...] = (
    DemoTenant("meridian-bank", "MRD", "United States", "USD", "$10,000", "us"),
    DemoTenant("harbour-trust", "HBT", "United Kingdom", "GBP", "£10,000", "iban_gb"),
    DemoTenant("alpen-privatbank", "ALP", "Switzerland", "CHF", "CHF 15,000", "iban_ch"),
)

JURISDICTIONS: tuple[str, ...] = (
    "Cyprus",
    "British Virgin Islands",
    "Panama",
    "Hong Kong",
    "United Arab Emirates",
    "Mexico",
    "Malta",
    "Latvia",
    "Singapore",
    "Cayman Islands",
    "Turkey",
    "Nigeria",
    "Colombia",
    "Seychelles",
    "Estonia",
    "Guatemala",
)

_FIRST = [
    "Maria",
    "James",
    "Olga",
    "Ahmed",
    "Chen",
    "Priya",
    "Lukas",
    "Sofia",
    "Daniel",
    "Aisha",
    "Mateo",
    "Elena",
    "Viktor",
    "Grace",
    "Tomasz",
    "Fatima",
    "Oliver",
    "Ines",
    "Hiroshi",
    "Amara",
    "Pavel",
    "Lucia",
    "Noah",
    "Zainab",
    "Marco",
    "Yuki",
    "Samuel",
    "Leila",
    "Andrei",
    "Chloe",
    "Kwame",
    "Nadia",
    "Henrik",
    "Rosa",
    "Dmitri",
    "Hannah",
    "Omar",
    "Claire",
    "Ivan",
    "Beatriz",
]
_LAST = [
    "Lopez",
    "Okafor",
    "Petrov",
    "Schmidt",
    "Nakamura",
    "Haddad",
    "Novak",
    "Rossi",
    "Fernandes",
    "Kowalski",
    "Mensah",
    "Ivanova",
    "Garcia",
    "Lindqvist",
    "Brennan",
    "Castillo",
    "Demir",
    "Achterberg",
    "Moreau",
    "Singh",
    "Tanaka",
    "Walsh",
    "Adeyemi",
    "Horvat",
    "Keller",
    "Duarte",
    "Volkov",
    "Osei",
    "Bianchi",
    "Jansen",
    "Rahman",
    "Whitfield",
    "Zhou",
    "Murphy",
    "Kaya",
    "Silva",
    "Abebe",
    "Larsen",
    "Costa",
    "Yilmaz",
    "Baker",
    "Ncube",
    "Sorensen",
    "Quintero",
    "Albescu",
]
_COMPANY_A = [
    "Bluewater",
    "Northstar",
    "Silverline",
    "Crescent",
    "Atlas",
    "Meridian",
    "Orchid",
    "Granite",
    "Falcon",
    "Harbor",
    "Cobalt",
    "Sapphire",
    "Evergreen",
    "Summit",
    "Pioneer",
    "Redwood",
    "Aurora",
    "Zenith",
    "Lighthouse",
    "Monarch",
]
_COMPANY_B = [
    "Trading",
    "Holdings",
    "Logistics",
    "Ventures",
    "Commodities",
    "Imports",
    "Capital",
    "Consulting",
    "Partners",
    "Group",
]
_COMPANY_C = ("Ltd", "LLC", "Inc", "S.A.", "GmbH", "Limited", "FZE", "Corp")
_ANALYSTS = ("a.keller", "b.osei", "c.moreau", "d.tanaka", "e.walsh", "f.rossi", "g.demir", "h.silva")

_OPENERS = (
    "Alert {alert} from the transaction monitoring {rule|scenario} {rule_id} was reviewed.",
    "Case opened following a {referral|tip} from the {branch|fraud|correspondent banking} team.",
    "Reviewed activity on {account} for the period under investigation.",
    "Initial triage of {subject}'s activity after an automated alert.",
    "{Follow-up|Second-level} review of the {alerted|flagged} activity.",
    "Periodic KYC refresh surfaced unusual activity for {subject}.",
    "Investigation {continues|resumed} after the RFI response was received.",
)
_SUBJECT_LINES = (
    "{subject} is a {occupation} whose stated income does not support the volumes observed.",
    "The customer, {subject}, describes the business as {industry}.",
    "{subject} opened {account} in {year} and lists {industry} as the source of funds.",
    "KYC on file for {subject} shows a {occupation} with an expected monthly turnover far below this.",
)
_DETAIL_LINES = (
    "Total activity under review: {amount} over {days} days.",
    "Aggregate value identified so far is {amount}.",
    "Counterparties include {cp} in {jur}.",
    "Related transfers involve {jur} and {jur2}.",
    "The review window covers {days} days of statements.",
)
_CLOSERS = (
    "Recommend filing a SAR.",
    "Escalated to the MLRO for a filing decision.",
    "Requested source-of-funds documentation from the relationship manager.",
    "RFI sent to the customer; awaiting a response.",
    "Account placed under enhanced monitoring.",
    "Recommend exiting the relationship and filing a SAR.",
    "No reasonable explanation was provided; SAR drafting to begin.",
)
_AMBIGUOUS_LINE = (
    "Activity also involves accounts {account} and {account2}; it is not yet confirmed which of them "
    "is held by {subject}."
)
_ALT = re.compile(r"\{([^{}]*\|[^{}]*)\}")


@dataclass(frozen=True, slots=True)
class DemoNote:
    """A generated note with the labels the query set is graded on."""

    note: CaseNote
    typology: str
    variant: str
    secondary: str | None


@dataclass(frozen=True, slots=True)
class LabelledQuery:
    """A query for one tenant with graded relevance (note id -> 1 or 2)."""

    query_id: str
    tenant: str
    text: str
    kind: str
    """`paraphrase`, `keyword`, `account_id`, `name` or `case_id`."""
    split: str
    """`tune` (used to pick the fusion weights) or `test` (held out for reporting)."""
    relevance: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DemoCorpus:
    notes: dict[str, list[DemoNote]]
    queries: list[LabelledQuery]


def _render(template: str, rng: random.Random, slots: dict[str, str]) -> str:
    text = _ALT.sub(lambda m: rng.choice(m.group(1).split("|")), template)
    text = text.format(**slots)
    return text[0].upper() + text[1:]


def _account(rng: random.Random, tenant: DemoTenant) -> str:
    digits = "".join(str(rng.randrange(10)) for _ in range(18))
    if tenant.account_style == "us":
        return f"{digits[:4]}-{digits[4:7]}-{digits[7:12]}"
    if tenant.account_style == "iban_gb":
        raw = f"GB{digits[:2]}HRBT{digits[2:16]}"
    else:
        raw = f"CH{digits[:2]}0076{digits[2:15]}"
    return " ".join(raw[i : i + 4] for i in range(0, len(raw), 4))


def _name(rng: random.Random) -> str:
    return f"{rng.choice(_FIRST)} {chr(65 + rng.randrange(26))}. {rng.choice(_LAST)}"


def _company(rng: random.Random) -> str:
    return f"{rng.choice(_COMPANY_A)} {rng.choice(_COMPANY_B)} {rng.choice(_COMPANY_C)}"


def _money(value: Decimal, tenant: DemoTenant) -> str:
    return f"{tenant.currency} {value:,.2f}"


def _case_notes(rng: random.Random, tenant: DemoTenant, case_no: int, note_budget: int) -> Iterator[DemoNote]:
    typology: Typology = rng.choice(TYPOLOGIES)
    variant: Variant = rng.choice(typology.variants)
    secondary: tuple[Typology, Variant] | None = None
    if rng.random() < 0.12:
        other = rng.choice([t for t in TYPOLOGIES if t.code != typology.code])
        secondary = (other, rng.choice(other.variants))
    case_id = f"{tenant.prefix}-C{case_no:06d}"
    missing_dob = rng.random() < 0.06
    ambiguous = rng.random() < 0.04
    subjects = []
    for k in range(rng.choice((1, 1, 2, 2, 3))):
        dob = date(1940 + rng.randrange(62), 1 + rng.randrange(12), 1 + rng.randrange(28))
        subjects.append(
            Subject(
                name=_name(rng),
                account_id=None if (ambiguous and k == 0) else _account(rng, tenant),
                role="primary" if k == 0 else rng.choice(("joint holder", "beneficiary", "signatory")),
                date_of_birth=None if (missing_dob and k == 0) else dob,
            )
        )
    primary = subjects[0]
    cp = _company(rng)
    jur, jur2 = rng.sample(JURISDICTIONS, 2)
    industry = rng.choice(INDUSTRIES)
    total = Decimal(rng.randrange(15_000, 4_000_000)).quantize(Decimal("1"))
    start = datetime(2023, 1, 1, tzinfo=UTC) + timedelta(days=rng.randrange(3 * 365 - 120))
    slots = {
        "subject": primary.name,
        "account": primary.account_id or _account(rng, tenant),
        "account2": _account(rng, tenant),
        "cp": cp,
        "jur": jur,
        "jur2": jur2,
        "industry": industry,
        "occupation": rng.choice(OCCUPATIONS),
        "amount": _money(total, tenant),
        "small": _money(Decimal(rng.randrange(8_000, 9_950)), tenant),
        "count": str(rng.randrange(3, 40)),
        "days": str(rng.randrange(5, 120)),
        "threshold": tenant.threshold,
        "age": str(rng.randrange(71, 96)),
        "year": str(rng.randrange(2009, 2023)),
        "alert": f"AL-{rng.randrange(10**7):07d}",
        "rule_id": f"TM-{rng.randrange(100, 999)}",
    }
    codes = (typology.code,) if secondary is None else (typology.code, secondary[0].code)
    moment = start
    for k in range(min(rng.randrange(2, 7), note_budget)):
        moment += timedelta(days=rng.randrange(0, 20), hours=rng.randrange(1, 10), minutes=rng.randrange(60))
        parts = [_render(rng.choice(_OPENERS), rng, slots)]
        for template in rng.sample(variant.behaviour, min(len(variant.behaviour), rng.choice((1, 2, 2, 3)))):
            parts.append(_render(template, rng, slots))
        if secondary is not None and rng.random() < 0.7:
            parts.append(_render(rng.choice(secondary[1].behaviour), rng, slots))
        if rng.random() < 0.5:
            parts.append(_render(rng.choice(_SUBJECT_LINES), rng, slots))
        parts.append(_render(rng.choice(_DETAIL_LINES), rng, slots))
        if ambiguous and k == 0:
            parts.append(_render(_AMBIGUOUS_LINE, rng, slots))
        parts.append(_render(rng.choice(_CLOSERS), rng, slots))
        note = CaseNote(
            note_id=f"{tenant.prefix}-N{case_no:06d}-{k + 1}",
            case_id=case_id,
            created_at=moment,
            text=" ".join(parts),
            author=rng.choice(_ANALYSTS),
            subjects=tuple(subjects),
            typologies=codes,
            amount=total,
            currency=tenant.currency,
            jurisdictions=(tenant.home, jur, jur2),
            counterparties=(cp,),
        )
        yield DemoNote(note, typology.code, variant.key, None if secondary is None else secondary[0].code)


def generate_notes(tenant: DemoTenant, notes_per_tenant: int, seed: int = DEFAULT_SEED) -> list[DemoNote]:
    """Exactly `notes_per_tenant` notes for one bank, the same for the same seed."""
    if not 1 <= notes_per_tenant <= MAX_NOTES_PER_TENANT:
        raise ValueError(f"notes_per_tenant must be between 1 and {MAX_NOTES_PER_TENANT}")
    rng = random.Random(f"{seed}:{tenant.name}")  # noqa: S311 - reproducible demo data, not secrets
    out: list[DemoNote] = []
    case_no = 0
    while len(out) < notes_per_tenant:
        case_no += 1
        out.extend(_case_notes(rng, tenant, case_no, notes_per_tenant - len(out)))
    return out


def _split(text: str) -> str:
    """Stable half/half assignment of a query to tuning or held-out testing."""
    return "tune" if hashlib.sha256(text.encode()).digest()[0] % 2 == 0 else "test"


def _variant_relevance(typology: Typology, variant: Variant, notes: Sequence[DemoNote]) -> dict[str, int]:
    relevance: dict[str, int] = {}
    for n in notes:
        if n.typology == typology.code and n.variant == variant.key:
            relevance[n.note.note_id] = 2
        elif typology.code in (n.typology, n.secondary):
            relevance[n.note.note_id] = 1
    return relevance


def _template_words(template: str) -> set[str]:
    text = _ALT.sub(lambda m: m.group(1).replace("|", " "), template)
    text = re.sub(r"\{[a-z0-9_]+\}", " ", text)
    return {w for w in re.findall(r"[a-z][a-z-]+", text.lower()) if len(w) >= 5}


def keyword_queries(tenant: str, notes: Sequence[DemoNote], seed: int) -> list[LabelledQuery]:
    """Analyst-style keyword queries that *do* use the notes' own distinctive words (BM25's home turf).

    They keep the fusion honest: tuned on paraphrases alone, lexical weight would drop to zero and
    searches that quote a note's wording would lose the keyword signal.
    """
    words = {
        v.key: set().union(*(_template_words(b) for b in v.behaviour)) for t in TYPOLOGIES for v in t.variants
    }
    rng = random.Random(f"{seed}:{tenant}:keyword")  # noqa: S311 - reproducible demo data
    out: list[LabelledQuery] = []
    for typology in TYPOLOGIES:
        for variant in typology.variants:
            others = set().union(*(w for k, w in words.items() if k != variant.key))
            own = sorted(words[variant.key] - others, key=lambda w: (-len(w), w))[:8]
            relevance = _variant_relevance(typology, variant, notes)
            for i in range(2):
                text = " ".join(rng.sample(own, min(3, len(own))))
                out.append(
                    LabelledQuery(
                        query_id=f"{tenant}:keyword:{variant.key}:{i}",
                        tenant=tenant,
                        text=text,
                        kind="keyword",
                        split=_split(f"{tenant}:{text}"),
                        relevance=relevance,
                    )
                )
    return out


def paraphrase_queries(tenant: str, notes: Sequence[DemoNote]) -> list[LabelledQuery]:
    """Every typology variant's paraphrased queries, graded against this tenant's notes."""
    out: list[LabelledQuery] = []
    for typology in TYPOLOGIES:
        for variant in typology.variants:
            relevance = _variant_relevance(typology, variant, notes)
            for i, text in enumerate(variant.queries):
                out.append(
                    LabelledQuery(
                        query_id=f"{tenant}:para:{variant.key}:{i}",
                        tenant=tenant,
                        text=text,
                        kind="paraphrase",
                        split=_split(text),
                        relevance=relevance,
                    )
                )
    return out


_EXACT_FORMS = {
    "account_id": ("{v}", "account {v}", "transactions on {v}", "{compact}"),
    "name": ("{v}", "{v} activity", "notes mentioning {v}", "{lower}"),
    "case_id": ("{v}", "case {v}", "{lower}"),
}


def exact_queries(tenant: str, notes: Sequence[DemoNote], per_kind: int, seed: int) -> list[LabelledQuery]:
    """Queries naming one account id, subject name or case id; every note carrying it is relevant."""
    carriers: dict[str, dict[str, set[str]]] = {"account_id": {}, "name": {}, "case_id": {}}
    for n in notes:
        carriers["case_id"].setdefault(n.note.case_id, set()).add(n.note.note_id)
        for s in n.note.subjects:
            carriers["name"].setdefault(s.name, set()).add(n.note.note_id)
            if s.account_id:
                carriers["account_id"].setdefault(s.account_id, set()).add(n.note.note_id)
    rng = random.Random(f"{seed}:{tenant}:exact")  # noqa: S311 - reproducible demo data
    out: list[LabelledQuery] = []
    for kind, values in carriers.items():
        chosen = rng.sample(sorted(values), min(per_kind, len(values)))
        for i, value in enumerate(chosen):
            form = _EXACT_FORMS[kind][i % len(_EXACT_FORMS[kind])]
            text = form.format(v=value, lower=value.lower(), compact=re.sub(r"[\s-]", "", value))
            out.append(
                LabelledQuery(
                    query_id=f"{tenant}:{kind}:{i}",
                    tenant=tenant,
                    text=text,
                    kind=kind,
                    split=_split(text),
                    relevance=dict.fromkeys(sorted(values[value]), 2),
                )
            )
    return out


def generate(notes_per_tenant: int, seed: int = DEFAULT_SEED, exact_per_kind: int = 20) -> DemoCorpus:
    """The whole demo: every bank's notes and the labelled query set built from them."""
    notes: dict[str, list[DemoNote]] = {}
    queries: list[LabelledQuery] = []
    for tenant in TENANTS:
        tenant_notes = generate_notes(tenant, notes_per_tenant, seed)
        notes[tenant.name] = tenant_notes
        queries += paraphrase_queries(tenant.name, tenant_notes)
        queries += keyword_queries(tenant.name, tenant_notes, seed)
        queries += exact_queries(tenant.name, tenant_notes, exact_per_kind, seed)
    return DemoCorpus(notes, queries)


def load_demo(
    store: NotesBackend,
    embedder: Embedder,
    notes_per_tenant: int = DEFAULT_NOTES_PER_TENANT,
    seed: int = DEFAULT_SEED,
    *,
    only_if_empty: bool = True,
    progress: BankProgress | None = None,
) -> dict[str, int]:
    """Load the demo banks into `store` (first `serve`); returns notes written per tenant.

    With `only_if_empty` a tenant that already has notes is left alone, so calling this on every
    start is cheap and never overwrites a bank's own data. `progress` hears each bank once written.
    """
    written: dict[str, int] = {}
    for position, tenant in enumerate(TENANTS, start=1):
        if only_if_empty and store.tenant(tenant.name).count() > 0:
            written[tenant.name] = 0
            continue
        demo = generate_notes(tenant, notes_per_tenant, seed)
        inserted, replaced = write_notes(store, tenant.name, [d.note for d in demo], embedder)
        written[tenant.name] = inserted + replaced
        if progress is not None:
            progress(tenant.name, written[tenant.name], position, len(TENANTS))
    return written
