# ruff: noqa: E501  (hand-written note fragments and queries are kept one per line)
"""Builds the analyst-prose labelled set: `notes-<bank>.jsonl` and `queries.json` beside this file.

Why a second set: the demo corpus is rendered from the same templates the static table and the
old fusion weights were tuned on, so it flatters them. This set is made differently: hand-written
fact fragments per typology, each in a full-sentence and a clipped form, are assembled by four
author styles (long narrative, terse bullets, abbreviation-heavy one-liners, hurried typing with
typos), in two banks' vocabularies (a US bank: CTR, wires, FinCEN, SAR; a European one: cash
lodgements, SEPA, the FIU, STR), with admin and follow-up notes that carry no typology, alerts
closed as false positives, and secondary typologies. The queries were written separately, as an
analyst would ask, without reusing the fragments' wording; their relevance is graded (3 the
case's typology, 2 a secondary typology, 1 a false-positive alert on that typology).

Dev/test: each typology's paraphrase queries are split in half by position (the first half
`dev`, tuning allowed; the second `test`, never tuned on); identifier and mixed queries alternate.

    .venv/bin/python benchmarks/prose_set/build.py   # deterministic (seed below)
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 4417

BANKS = {
    "harbor-national": {
        "case": "HN-{year}-{n:04d}",
        "account": "{a:04d}-{b:04d}-{c:02d}",
        "vocab": {
            "limit": "$10,000",
            "cash": "cash deposits",
            "cashs": "cash deposit",
            "xfer": "wire",
            "xfers": "wires",
            "acct": "checking account",
            "report": "SAR",
            "regulator": "FinCEN",
            "ctr": "CTR",
            "cur": "USD",
            "branch": "branch",
            "id": "SSN",
            "exch": "Coinbase",
            "haven": "Delaware LLC",
        },
    },
    "rhein-union": {
        "case": "RU/{year}/{n:04d}",
        "account": "DE{a:02d} {b:04d} {c:04d} 0{d:03d} 1{e:03d} 00",
        "vocab": {
            "limit": "EUR 10,000",
            "cash": "cash lodgements",
            "cashs": "cash lodgement",
            "xfer": "SEPA transfer",
            "xfers": "SEPA transfers",
            "acct": "current account",
            "report": "STR",
            "regulator": "the FIU",
            "ctr": "cash declaration",
            "cur": "EUR",
            "branch": "Filiale",
            "id": "passport",
            "exch": "Bitpanda",
            "haven": "Cyprus company",
        },
    },
}

# Facts per typology: (full sentence, clipped form). {v} slots take the bank's vocabulary.
FACTS: dict[str, list[tuple[str, str]]] = {
    "structuring": [
        (
            "Over nine days the customer made eleven {cash} between 8,500 and 9,800 {cur}, never reaching {limit}.",
            "11 {cash} 8.5-9.8k {cur} in 9 days, none over {limit}",
        ),
        (
            "Teller staff noticed the customer asked how much he could pay in before a {ctr} was filed.",
            "cust asked teller abt {ctr} trigger amount",
        ),
        (
            "Deposits were split across three {branch} locations on the same afternoon.",
            "same-day deposits at 3 {branch}es",
        ),
        (
            "Two relatives also paid cash into the {acct}, each amount just short of the limit.",
            "family members also depositing cash, all just under limit",
        ),
        (
            "When we asked, the customer said he did not want the tax office looking at his takings.",
            "said he doesnt want tax office seeing takings",
        ),
        (
            "The pattern stopped the week after the first {ctr} was generated.",
            "activity stopped after 1st {ctr}",
        ),
    ],
    "money_mule": [
        (
            "The {acct} was opened in March and within a fortnight received incoming {xfers} from unrelated individuals.",
            "new acct, inbound {xfers} frm unrelated ppl within 2 wks",
        ),
        (
            "Almost all funds were withdrawn at ATMs or sent onward within 24 hours of arrival.",
            "funds out via ATM / onward {xfer} <24h",
        ),
        (
            "The customer is a 19-year-old student whose stated income is a part-time job.",
            "19yo student, pt job income only",
        ),
        (
            "She told the branch a man she met online asked her to receive payments for his business.",
            "says online contact asked her to 'receive payments for his biz'",
        ),
        (
            "Several senders have since reported the payments as fraud and requested recalls.",
            "recall requests from senders, fraud claims",
        ),
        (
            "Balance is always returned to near zero; the account is a pass-through.",
            "bal back to ~0 each time, pass-through",
        ),
    ],
    "shell_company": [
        (
            "The corporate client has no website, no staff on record and a registered address shared with forty other firms.",
            "no website/staff, reg address shared w 40 cos",
        ),
        (
            "Funds arrive from a {haven} and leave the same day to an entity in the British Virgin Islands.",
            "in from {haven}, out same day to BVI entity",
        ),
        (
            "The beneficial owner could not be confirmed; the director is a nominee who signs for dozens of companies.",
            "UBO unverified, nominee director on dozens of cos",
        ),
        (
            "Invoices supplied to justify the {xfers} describe vague consulting services with round amounts.",
            "'consulting' invoices, round amounts, vague",
        ),
        (
            "Turnover of several million {cur} is out of line with a company formed eight months ago.",
            "multi-mn {cur} turnover, co only 8 months old",
        ),
        (
            "The ownership chain runs through three jurisdictions before ending in a trust.",
            "ownership via 3 jurisdictions ending in trust",
        ),
    ],
    "trade_based": [
        (
            "The importer paid 410,000 {cur} for a container of used textiles that customs valued at a fraction of that.",
            "paid 410k {cur} for used textiles, customs value tiny fraction",
        ),
        (
            "Bills of lading show the same shipment referenced on two separate letters of credit.",
            "same shipment on 2 LCs (B/L reuse)",
        ),
        (
            "Goods were invoiced to a buyer in Dubai but shipped to a port in West Africa.",
            "invoiced Dubai, shipped W Africa",
        ),
        (
            "Payments for the cargo came from third parties with no link to the contract.",
            "3rd-party payers unrelated to contract",
        ),
        (
            "The quantity on the invoice does not match the container weight on the manifest.",
            "invoice qty != manifest weight",
        ),
        (
            "Unit prices for the electronics are about four times the going market rate.",
            "electronics unit price ~4x market",
        ),
    ],
    "crypto": [
        (
            "The customer bought cryptocurrency at {exch} with funds from the {acct} and moved it to a private wallet.",
            "{acct} -> {exch} -> private wallet",
        ),
        (
            "Blockchain analytics show the wallet received coins that passed through a mixing service.",
            "chain analytics: wallet got mixer-touched coins",
        ),
        (
            "Large cash-outs from the exchange came back as {xfers} soon after the coins were mixed.",
            "big exchange cash-outs back as {xfers} post-mixing",
        ),
        (
            "The customer uses several exchanges and says the gains come from day trading, without records.",
            "multiple exchanges, claims day-trading gains, no records",
        ),
        (
            "Some coins were traced to a darknet market address.",
            "some coins traced to darknet mkt addr",
        ),
        (
            "Peer-to-peer trades were settled in cash with people the customer met on a messaging app.",
            "P2P trades settled cash, counterparties via messaging app",
        ),
    ],
    "elder_abuse": [
        (
            "An 84-year-old widow's savings fell by 120,000 {cur} in two months after a new 'carer' was added to the account.",
            "84yo widow, savings -120k {cur} in 2 mths after new 'carer' added",
        ),
        (
            "The carer accompanies her to the {branch} and answers questions on her behalf.",
            "carer comes to {branch}, answers for her",
        ),
        (
            "Cheques were made out to the carer's relatives for 'house repairs' that her son says never happened.",
            "cheques to carer's family for 'repairs' - son says none done",
        ),
        (
            "A power of attorney was registered last month, signed while she was in hospital.",
            "POA registered last month, signed while in hospital",
        ),
        (
            "She seemed confused about her balance and did not recognise several withdrawals.",
            "confused abt balance, didnt recognise withdrawals",
        ),
        (
            "Her pension used to cover her spending; the account is now overdrawn every month.",
            "was living on pension, now overdrawn monthly",
        ),
    ],
    "casino": [
        (
            "The customer bought chips with 60,000 {cur} in small notes and cashed out after minimal play.",
            "60k {cur} small notes -> chips, minimal play, cashed out",
        ),
        (
            "He asks for his winnings as a casino cheque, which he then pays into the {acct}.",
            "wants casino cheque for 'winnings', deposits to {acct}",
        ),
        (
            "Gaming records show he rarely bets more than a few hundred at a time.",
            "gaming records: small bets only",
        ),
        (
            "Friends hand him chips at the table, which he redeems in one go.",
            "gets chips from associates at table, redeems all at once",
        ),
        (
            "His declared occupation is unemployed, yet he visits the casino four nights a week.",
            "unemployed, at casino 4 nights/wk",
        ),
        (
            "Online gambling accounts are topped up from several cards and withdrawn to his {acct}.",
            "online betting topped up multiple cards, withdrawn to {acct}",
        ),
    ],
    "sanctions": [
        (
            "A payment of 75,000 {cur} was routed through an intermediary in Armenia to a buyer linked to a listed Russian entity.",
            "75k {cur} via Armenian intermediary to buyer linked to listed RU entity",
        ),
        (
            "The goods are dual-use machine parts subject to export controls.",
            "dual-use machine parts, export-controlled",
        ),
        (
            "The counterparty's director appears on the consolidated list under a transliterated spelling.",
            "cpty director on consolidated list (translit. spelling)",
        ),
        (
            "Shipping documents list a vessel that switched off its transponder near a blocked port.",
            "vessel went dark (AIS off) near blocked port",
        ),
        (
            "Payment references were altered to remove the end user's name.",
            "payment refs stripped of end-user name",
        ),
        (
            "The customer's trade volume with the region tripled after the latest restrictions.",
            "trade w/ region tripled after new restrictions",
        ),
    ],
}

CONCLUDE = [
    "Recommend filing a {report}.",
    "Escalated to the MLRO for a {report} decision.",
    "Filing {report} with {regulator}; account under review for exit.",
    "Referred to {regulator} via {report}.",
]
ADMIN = [
    "Called the customer twice, no answer. Left a voicemail asking for a call back.",
    "Requested bank statements for the last six months from the customer; deadline in 14 days.",
    "Case reassigned to {author2} while {author} is on leave.",
    "KYC refresh completed; address and {id} details unchanged.",
    "Chased the customer for the outstanding documents again. Nothing received yet.",
    "Meeting with the relationship manager scheduled for Thursday to discuss the file.",
    "QA review: narrative needs dates and amounts before sign-off.",
    "Customer emailed to say he is travelling and will reply next month.",
    "Account restrictions lifted after documents were received and checked.",
    "No further activity this month. Keep monitoring, next review in 90 days.",
    "Internal audit sampled this case; no findings.",
    "Duplicate alert merged into this case.",
]
FALSE_POSITIVE = {
    "structuring": "Alert on repeated {cash} below {limit} reviewed: the customer runs a laundromat and pays in the daily takings, consistent with the business profile. Closed, no {report}.",
    "money_mule": "Alert for many incoming {xfers} reviewed: they are rent from tenants of the customer's three flats, with leases on file. Closed as expected activity.",
    "shell_company": "Alert on a newly formed company with high turnover reviewed: a subsidiary of a listed group, ownership verified through the group's annual report. No concern.",
    "trade_based": "Trade alert on price mismatch reviewed: the invoice was in {cur} and the customs value in another currency; after conversion the values agree. False positive.",
    "crypto": "Alert on {xfers} to {exch} reviewed: small monthly savings into a regulated crypto fund, source of funds is salary. Closed.",
    "elder_abuse": "Alert on large withdrawals from an elderly customer's account reviewed: she is paying for her granddaughter's wedding, confirmed in person at the {branch} without anyone else present. Closed.",
    "casino": "Alert on casino cheques reviewed: the customer is a professional poker player with tax returns showing gambling income. Closed.",
    "sanctions": "Sanctions screening hit on the counterparty's name reviewed: different date of birth and nationality from the listed person. False positive, payment released.",
}
# Secondary-typology facts appended to some notes of another primary typology.
SECONDARY = {
    "structuring": "Some of the money came in as {cash} kept just under {limit}.",
    "money_mule": "Part of the funds went out the same day through accounts opened by young people with no history.",
    "shell_company": "The receiving company has a nominee director and no visible operations.",
    "trade_based": "The payments were justified with invoices for goods whose prices look inflated.",
    "crypto": "A share of the money was converted to cryptocurrency and sent to an unhosted wallet.",
    "elder_abuse": "Some of the money came from an elderly relative who may not understand the transfers.",
    "casino": "The customer also cashes chips at a casino after very little play.",
    "sanctions": "One counterparty turned out to be owned by a sanctioned individual.",
}

# Queries written separately from the fragments: how an analyst asks. First half dev, second half test.
QUERIES: dict[str, list[str]] = {
    "structuring": [
        "customer breaking up cash so no currency report gets filed",
        "smurfing at several branches",
        "someone avoiding the reporting threshold by making many smaller deposits",
        "cash payments deliberately kept below the reporting limit",
        "several under-threshold lodgements on the same day to dodge reporting",
        "client splitting his cash to stay under the radar of the tax authorities",
    ],
    "money_mule": [
        "young person lending their account to move other people's money",
        "funds come in from strangers and go straight out again",
        "recruited online to receive and forward payments",
        "student account used as a conduit for fraud proceeds",
        "account emptied right after incoming payments from unknown senders",
        "possible mule: quick in-and-out transfers, victims asking for their money back",
    ],
    "shell_company": [
        "company with no real business used to pass money through",
        "front company with nominee director and offshore transfers",
        "cannot identify who really owns the firm",
        "letterbox company moving millions with fake consulting invoices",
        "layering through corporate entities in tax havens",
        "business that exists only on paper receiving large payments",
    ],
    "trade_based": [
        "over-invoicing of imported goods",
        "mismatch between shipping documents and what was paid",
        "moving value through international trade with false prices",
        "import payments much higher than the goods are worth",
        "same cargo financed twice and goods sent to a different country",
        "exporter paid by unrelated third parties for overpriced shipments",
    ],
    "crypto": [
        "bitcoin tumbler used to hide where coins came from",
        "converting bank money into virtual currency and back",
        "crypto proceeds possibly from illegal online markets",
        "coins laundered through a mixer before being cashed out",
        "unexplained trading profits from digital asset exchanges",
        "peer to peer bitcoin sales paid in cash",
    ],
    "elder_abuse": [
        "elderly client being exploited by someone who looks after her",
        "pensioner losing savings to a caregiver",
        "vulnerable old lady, suspicious power of attorney",
        "financial abuse of a senior customer by a helper",
        "someone controlling an old woman's bank account and draining it",
        "older customer does not understand withdrawals made in her name",
    ],
    "casino": [
        "gambling used to clean cash",
        "buys chips with cash and takes a cheque without really playing",
        "claims large gambling winnings that do not match his betting",
        "laundering through casino chip purchases and redemptions",
        "no job but spends most nights gambling",
        "online betting accounts used to turn card money into clean withdrawals",
    ],
    "sanctions": [
        "payments to a sanctioned party through a middleman country",
        "evading export restrictions on Russia",
        "dual use goods going to a designated entity",
        "transactions hiding the real end user to get round sanctions",
        "ship turned off tracking near an embargoed port",
        "trade with a restricted region surged after new sanctions",
    ],
}
# Mixed queries: a subject's name with a typology in the analyst's words.
MIXED_TOPIC = {
    "structuring": "cash kept under the limit",
    "money_mule": "passing money through for others",
    "shell_company": "offshore front company",
    "trade_based": "overpriced invoices",
    "crypto": "crypto mixer",
    "elder_abuse": "exploiting an elderly person",
    "casino": "casino chips",
    "sanctions": "sanctioned counterparty",
}

FIRST = "Mariana Tomasz Keiko Olu Ruth Dmitri Amara Piet Lucia Hamid Ingrid Chidi Sven Noor Rafael Greta Yusuf Ana Bram Leila"
LAST = "Okafor Lindqvist Brennan Hashimoto Vasquez Kowalczyk Adeyemi Marchetti Van Dijk Haddad Novak Fairweather Ostrowski Achterberg Quintero Sorensen Baptiste Ilyina Mbeki Castellano"
AUTHORS = {
    "narrative": ["J. Whitfield", "A. Moreau"],
    "bullets": ["R. Chen", "S. Petrova"],
    "oneliner": ["T. Osei", "K. Fischer"],
    "typos": ["D. Mahlangu", "L. Brandt"],
}
ABBREVIATIONS = {
    "customer": "cust",
    "account": "acct",
    "transactions": "txns",
    "with": "w/",
    "about": "abt",
    "received": "rcvd",
    "between": "btwn",
    "business": "biz",
    "months": "mths",
    "because": "bc",
    "information": "info",
}


def _typo(word: str, rng: random.Random) -> str:
    if len(word) < 5 or not word.isalpha():
        return word
    i = rng.randrange(1, len(word) - 2)
    kind = rng.randrange(3)
    if kind == 0:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == 1:
        return word[:i] + word[i + 1 :]
    return word[:i] + word[i] + word[i:]


def _fill(text: str, vocab: dict[str, str], **extra: str) -> str:
    return text.format(**vocab, **extra)


def _style(style: str, facts: list[tuple[str, str]], vocab: dict[str, str], rng: random.Random) -> str:
    if style == "narrative":
        body = " ".join(_fill(full, vocab) for full, _ in facts)
        opener = rng.choice(
            [
                "Reviewed the alert and the last three months of activity.",
                "Summary of the investigation so far.",
                "Following the transaction monitoring alert, I looked at the account in detail.",
            ]
        )
        return f"{opener} {body} {_fill(rng.choice(CONCLUDE), vocab)}"
    if style == "bullets":
        return (
            "\n".join(f"- {_fill(short, vocab)}" for _, short in facts)
            + "\n- next: "
            + rng.choice(["escalate", "RFI sent", "draft " + vocab["report"], "discuss w/ MLRO"])
        )
    if style == "oneliner":
        words = "; ".join(_fill(short, vocab) for _, short in facts).split(" ")
        return " ".join(ABBREVIATIONS.get(w.lower(), w) for w in words) + " - " + vocab["report"] + "?"
    text = " ".join(_fill(full, vocab) for full, _ in facts)
    return " ".join(_typo(w, rng) if rng.random() < 0.18 else w for w in text.split(" ")).lower()


def build() -> None:
    rng = random.Random(SEED)
    typologies = list(FACTS)
    firsts, lasts = FIRST.split(), LAST.split(" ")
    queries: list[dict[str, object]] = []
    for bank, spec in BANKS.items():
        vocab = spec["vocab"]
        assert isinstance(vocab, dict)
        notes: list[dict[str, object]] = []
        cases: list[dict[str, object]] = []
        start = datetime(2024, 1, 8, 9, 0, tzinfo=UTC)
        for n in range(1, 73):
            typology = typologies[n % len(typologies)]
            false_positive = n % 5 == 0
            secondary = rng.choice([t for t in typologies if t != typology]) if n % 3 == 0 else None
            name = f"{rng.choice(firsts)} {rng.choice(lasts)}"
            case_id = str(spec["case"]).format(year=2024, n=n * 7 + 100)
            account = str(spec["account"]).format(
                a=rng.randrange(10, 99),
                b=rng.randrange(1000, 9999),
                c=rng.randrange(10, 9999),
                d=rng.randrange(100, 999),
                e=rng.randrange(100, 999),
            )
            subjects = [{"name": name, "account_id": account, "role": "subject"}]
            when = start + timedelta(days=n * 5)
            case_notes: list[tuple[str, list[str], str]] = []  # text, typologies, kind
            if false_positive:
                case_notes.append((_fill(FALSE_POSITIVE[typology], vocab), [], "false_positive"))
            else:
                style_order = rng.sample(list(AUTHORS), k=rng.randrange(1, 3))
                pool = FACTS[typology][:]
                rng.shuffle(pool)
                for i, style in enumerate(style_order):
                    chosen = pool[i * 3 : i * 3 + 3]
                    text = _style(style, chosen, vocab, rng)
                    tags = [typology]
                    if secondary is not None and i == 0:
                        text += " " + _fill(SECONDARY[secondary], vocab)
                        tags.append(secondary)
                    case_notes.append((text, tags, style))
            for _ in range(rng.randrange(1, 3)):
                author, author2 = rng.sample([a for group in AUTHORS.values() for a in group], 2)
                case_notes.append(
                    (_fill(rng.choice(ADMIN), vocab, author=author, author2=author2), [], "admin")
                )
            ids = []
            for k, (text, tags, kind) in enumerate(case_notes):
                note_id = f"{case_id}-N{k + 1}"
                author = rng.choice(AUTHORS.get(kind, [a for g in AUTHORS.values() for a in g]))
                notes.append(
                    {
                        "note_id": note_id,
                        "case_id": case_id,
                        "created_at": (when + timedelta(days=k * 3, hours=k)).isoformat(),
                        "text": text,
                        "author": author,
                        "subjects": subjects,
                        "typologies": tags,
                    }
                )
                ids.append((note_id, tags, kind))
            cases.append(
                {"case_id": case_id, "name": name, "account": account, "typology": typology, "notes": ids}
            )

        def grade(note: tuple[str, list[str], str], typology: str) -> int:
            _, tags, _ = note
            if tags and tags[0] == typology:
                return 3
            if typology in tags:
                return 2
            return 0

        for typology, texts in QUERIES.items():
            relevance = {}
            for case in cases:
                for note in case["notes"]:  # type: ignore[attr-defined]
                    g = grade(note, typology)
                    if g:
                        relevance[note[0]] = g
                    elif note[2] == "false_positive" and case["typology"] == typology:
                        relevance[note[0]] = 1
            for i, text in enumerate(texts):
                queries.append(
                    {
                        "query_id": f"{bank}:para:{typology}:{i}",
                        "tenant": bank,
                        "text": text,
                        "kind": "paraphrase",
                        "split": "dev" if i < len(texts) // 2 else "test",
                        "relevance": relevance,
                    }
                )
        for i, case in enumerate(cases):
            every = {n[0]: 3 for n in case["notes"]}  # type: ignore[attr-defined]
            split = "dev" if i % 2 == 0 else "test"
            kinds = {"case_id": case["case_id"], "account_id": case["account"], "name": case["name"]}
            kind = list(kinds)[i % 3]
            same_subject = {
                n[0]: 3
                for c in cases
                if c["name"] == case["name"]
                for n in c["notes"]  # type: ignore[attr-defined]
            }
            relevance = same_subject if kind == "name" else every
            queries.append(
                {
                    "query_id": f"{bank}:id:{kind}:{i}",
                    "tenant": bank,
                    "text": str(kinds[kind]),
                    "kind": "identifier",
                    "split": split,
                    "relevance": relevance,
                }
            )
            if i % 4 == 1 and case["notes"][0][2] != "false_positive":  # type: ignore[index]
                typology = str(case["typology"])
                mixed = {n[0]: (3 if grade(n, typology) else 1) for n in case["notes"]}  # type: ignore[attr-defined]
                queries.append(
                    {
                        "query_id": f"{bank}:mixed:{i}",
                        "tenant": bank,
                        "text": f"{case['name']} {MIXED_TOPIC[typology]}",
                        "kind": "mixed",
                        "split": "dev" if i % 8 == 1 else "test",
                        "relevance": mixed,
                    }
                )
        with (HERE / f"notes-{bank}.jsonl").open("w", encoding="utf-8") as out:
            for note in notes:
                out.write(json.dumps(note, ensure_ascii=False) + "\n")
        print(f"{bank}: {len(notes)} notes in {len(cases)} cases")
    (HERE / "queries.json").write_text(json.dumps(queries, indent=1, ensure_ascii=False) + "\n", "utf-8")
    kinds: dict[str, int] = {}
    for q in queries:
        key = f"{q['kind']}/{q['split']}"
        kinds[key] = kinds.get(key, 0) + 1
    print(f"{len(queries)} queries: {kinds}")


if __name__ == "__main__":
    build()
