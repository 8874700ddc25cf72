"""The statements the PostgreSQL notes store reads with: BM25 over a plan's candidates, the AND
listing and the identifier lookup (`postgres.py` runs them).

Why BM25 is computed here rather than by `ts_rank_cd`: `ts_rank_cd` has no inverse document
frequency and no length saturation, so a rare name ranked like a common word (lexical nDCG@10 for
names 0.388 against SQLite's 0.838), and it scored every note holding any query word, in time
proportional to the bank. The formula and the candidate plan are `notes.bm25`'s (FTS5's `bm25()`
with SQLite's column weights, so scores mean the same on both backends); each statement's text
depends only on the number of words and the filter, so a connection prepares it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import LiteralString

from aml_mcp.aml.notes.bm25 import K1, B, BankTotals, TermStats, plan_expression
from aml_mcp.aml.notes.model import NoteFilter

TERM_FREQUENCY = "cardinality(u.weights) + 0.5 * cardinality(array_positions(u.weights, 'A'))"
"""A word's weighted frequency in a note, from a row of `unnest(lexemes)` (`u`): 1 per occurrence in
the text (weight B), 1.5 in the subjects or identifiers (weight A), as SQLite weights its columns."""
STATISTICS: LiteralString = (
    "SELECT t.tenant_id, t.generation, t.notes, t.tokens, k.df, k.max_tf, k.min_length"
    " FROM aml_note_tenants t LEFT JOIN LATERAL (SELECT w.i, s.df, s.max_tf, s.min_length"
    " FROM unnest(%s::text[]) WITH ORDINALITY w(word, i)"
    " CROSS JOIN LATERAL (SELECT tsvector_to_array(to_tsvector('english'::regconfig, w.word)) AS l) x"
    " LEFT JOIN aml_note_terms s ON s.tenant_id = t.tenant_id AND cardinality(x.l) = 1"
    " AND regexp_count(w.word, '[^[:space:][:punct:][:cntrl:]]+') = 1 AND s.lexeme = x.l[1]"
    ") k ON true WHERE t.name = %s ORDER BY k.i"
)
"""A bank's id, generation and totals, and per word (in order) the kept statistics of its lexeme;
none for a word `english` makes no lexeme of (a stop word) or two ("x³y": in no note as one)."""
Known = tuple[int, int, BankTotals, dict[str, TermStats]]
"""(generation, bank id, its totals, each term's statistics): what BM25 needs of a bank."""

CONFIG: LiteralString = "'english'::regconfig"
FREQUENCY: LiteralString = (
    "CASE WHEN n.lexemes @@ q.q{k}"
    " THEN round(3 * ts_rank_cd('{{0.1, 0.1, 0.6666667, 1}}', n.lexemes, q.q{k})) / 2"
    " ELSE 0 END"
)
"""A word's weighted frequency in note `n` (1 per occurrence in the text, 1.5 in the subjects or
identifiers): for a one-word query `ts_rank_cd` sums the weights of its positions (each occurrence
is a cover of its own), here 2/3 and 1, so 1.5 times it is the frequency, a multiple of 0.5. Only
asked of a note holding the word: the containment test costs a tenth of the rank."""
CANDIDATE_BUDGET = 100
"""Notes a search expects to score before it settles for an exact head and a filled tail (bm25.py)."""
CANDIDATE_CAP = 2000
"""Notes a search scores at most, whatever the plan expected."""
FILL = 20
"""Notes holding the best word a search adds below an exact head of fewer than it asked for."""


def tsquery(operator: str, count: int) -> str:
    """`count` words, each through `plainto_tsquery`, joined by `operator` (`AND` or `OR`) as `&&` or
    `||`, the grammar `notes.storage` defines translated. A word `english` drops as a stop word
    yields an empty query, which `||` and `&&` ignore."""
    joiner = " && " if operator == "AND" else " || "
    return "(" + joiner.join([f"plainto_tsquery({CONFIG}, %s)"] * count) + ")"


def partition(tenant_id: int) -> str:
    """A bank's own partition of `aml_notes`, named by the integer the store minted (never caller text)."""
    return f"aml_notes_t{int(tenant_id)}"


def note_filter(where: NoteFilter) -> tuple[str, list[object]]:
    """`where` as a SQL fragment over table alias `n` (starting with ` AND `, or empty), and its
    parameters."""
    return where.sql("%s", "strpos(n.typologies, %s) > 0")


def ranking(
    known: Known, operator: str, terms: Sequence[str], where: NoteFilter, limit: int
) -> tuple[str, list[object]] | None:
    """The statement that scores a plan's candidates by BM25 (and, when it expects fewer than
    `limit`, notes holding its best word besides), best first: (generation, row id, score) rows,
    one with no note when none matched, so the caller sees whether its statistics are the rows'.

    Its text depends only on the number of words, the filter and the fill, so that it is prepared
    once per connection (planning it was a tenth of a millisecond): the plan's condition is one
    `to_tsquery` parameter written over the words (letters and digits only, by the grammar)."""
    _, tenant_id, bank, stats = known
    words = [stats[term] for term in terms]
    plan = plan_expression(operator == "AND", words, bank, CANDIDATE_BUDGET)
    if not plan.clauses:
        return None  # no note holds a word (or, for AND, every word)
    used = [i for i, word in enumerate(words) if word.df > 0]  # a word no note holds adds nothing
    condition = " | ".join("(" + " & ".join(terms[i] for i in clause) + ")" for clause in plan.clauses)
    extra, params = note_filter(where)
    frequencies = "".join(f", {FREQUENCY.format(k=k)} AS f{k}" for k in range(len(used)))
    norm = [K1 * (1 - B), K1 * B / (bank.average_length or 1.0)]
    branch = (
        f"(SELECT n.rowid, %s + %s * n.length AS norm{frequencies} FROM {partition(tenant_id)} n, q"  # noqa: S608
        " WHERE n.tenant_id = %s AND n.lexemes @@ CONDITION" + extra + " LIMIT %s)"
    )
    branches, args = [branch.replace("CONDITION", "q.c")], [*norm, tenant_id, *params, CANDIDATE_CAP]
    if plan.threshold > 0 and plan.expected < limit:
        best = max(range(len(used)), key=lambda k: words[used[k]].bound(bank))
        branches.append(branch.replace("CONDITION", f"q.q{best} AND NOT n.lexemes @@ q.c"))
        args += [*norm, tenant_id, *params, min(limit, FILL)]
    score = " + ".join(f"%s * s.f{k} / (s.f{k} + s.norm)" for k in range(len(used)))
    query = (
        f"WITH q AS MATERIALIZED (SELECT to_tsquery({CONFIG}, %s) AS c"  # noqa: S608
        + "".join(f", plainto_tsquery({CONFIG}, %s) AS q{k}" for k in range(len(used)))
        + ") SELECT t.generation, r.rowid, r.score FROM aml_note_tenants t LEFT JOIN LATERAL"  # noqa: S608
        f" (SELECT s.rowid, {score} AS score FROM ({' UNION ALL '.join(branches)}) s"
        " ORDER BY score DESC, s.rowid LIMIT %s) r ON true WHERE t.tenant_id = %s"
    )
    weights = [words[i].idf(bank) * (K1 + 1) for i in used]
    return query, [condition, *(terms[i] for i in used), *weights, *args, limit, tenant_id]


def matching(
    tenant_id: int, operator: str, terms: Sequence[str], where: NoteFilter, limit: int
) -> tuple[str, list[object]]:
    extra, params = note_filter(where)
    query = f"SELECT n.rowid FROM {partition(tenant_id)} n WHERE n.tenant_id = %s AND n.lexemes @@ "  # noqa: S608
    return query + tsquery(operator, len(terms)) + extra + " LIMIT %s", [tenant_id, *terms, *params, limit]


def identifier_lookup(tenant_id: int, wanted: Sequence[str], where: NoteFilter) -> tuple[str, list[object]]:
    extra, params = note_filter(where)
    if not extra:  # a note's identifiers are written and deleted with it: no join needed
        query = "SELECT note_rowid, kind, value FROM aml_note_identifiers"
        query += " WHERE tenant_id = %s AND value = ANY(%s)"
        return query, [tenant_id, list(wanted)]
    query = (
        "SELECT i.note_rowid, i.kind, i.value FROM aml_note_identifiers i"  # noqa: S608
        f" JOIN {partition(tenant_id)} n ON n.tenant_id = i.tenant_id AND n.rowid = i.note_rowid"
        " WHERE i.tenant_id = %s AND n.tenant_id = %s AND i.value = ANY(%s)" + extra
    )
    return query, [tenant_id, tenant_id, list(wanted), *params]
