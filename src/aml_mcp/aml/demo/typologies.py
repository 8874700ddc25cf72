"""The demo corpus's typologies: how analysts word each behaviour, and how an assistant asks for it.

Why two vocabularies: the labelled query set must measure meaning, not word overlap. Note
templates use one set of words (with `{a|b|c}` alternatives so notes vary among themselves); the
paraphrased queries describe the same behaviour in other words, avoiding each typology's note
vocabulary as far as English allows. `benchmarks/search_quality.py` reports how much lexical
overlap remains.

Template slots: `{subject}`, `{account}`, `{account2}`, `{cp}` (counterparty), `{jur}`, `{jur2}`,
`{industry}`, `{amount}`, `{small}` (a sub-threshold amount), `{count}`, `{days}`, `{threshold}`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Variant:
    """One behaviour pattern of a typology; relevance grade 2 for its queries."""

    key: str
    behaviour: tuple[str, ...]
    queries: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Typology:
    code: str
    label: str
    variants: tuple[Variant, ...]


TYPOLOGIES: tuple[Typology, ...] = (
    Typology(
        "structuring",
        "Structuring",
        (
            Variant(
                "below_threshold_cash",
                (
                    "{subject} made {count} cash deposits of {small} each, every one kept just below the "
                    "{threshold} {reporting|CTR} threshold.",
                    "Deposits into {account} were consistently sized under {threshold}, {count} of them "
                    "within {days} days, which suggests deliberate avoidance of currency transaction "
                    "reporting.",
                    "The pattern shows cash credits clustered between 9,000 and 9,900, never reaching "
                    "the {reporting|CTR} limit.",
                    "Teller notes indicate the customer asked what amount triggers a report before "
                    "splitting the {cash|currency} into smaller deposits.",
                ),
                (
                    "chopping big sums so no lone lodgement needs federal paperwork",
                    "someone topping up repeatedly with sums shy of ten grand to dodge paperwork",
                    "evading mandatory government forms by slicing banknote sums into pieces",
                ),
            ),
            Variant(
                "multi_branch",
                (
                    "{subject} visited {count} different branches on the same day, depositing {small} "
                    "at each location.",
                    "Same-day {cash|currency} deposits at multiple branches were aggregated to "
                    "{amount}, although no single deposit exceeded {threshold}.",
                    "Branch hopping was observed: the customer moved between locations in {jur} to keep "
                    "each deposit below the threshold.",
                ),
                (
                    "person touring several of our offices in one afternoon handing over modest sums",
                    "going from outlet to outlet over an afternoon so every lodgement looks small",
                ),
            ),
        ),
    ),
    Typology(
        "smurfing",
        "Smurfing",
        (
            Variant(
                "third_party_depositors",
                (
                    "{count} unrelated individuals deposited {cash|currency} into {account}, each "
                    "contribution under {threshold}.",
                    "Multiple third-party depositors with no apparent connection to {subject} made "
                    "small credits to the account from different towns.",
                    "Depositors included students and day labourers who could not explain their "
                    "relationship with the account holder.",
                    "The account received {count} cash-ins from distinct people, then the balance was "
                    "withdrawn in full.",
                ),
                (
                    "many strangers topping up one man's holding in little sums",
                    "a crowd of recruited helpers chipping in tiny sums for someone else",
                    "runners hired to feed modest sums into another person's holding",
                ),
            ),
            Variant(
                "money_orders",
                (
                    "Several people purchased money orders of {small} each, all payable to {subject}.",
                    "Sequentially numbered money orders bought by different purchasers were deposited "
                    "together into {account}.",
                    "{count} money orders from various buyers, each below reporting limits, were "
                    "negotiated at once.",
                ),
                (
                    "postal instruments obtained by assorted folks then lodged in one go by one payee",
                    "consecutive remittance slips acquired by assorted shoppers, redeemed as a bundle",
                ),
            ),
        ),
    ),
    Typology(
        "funnel_account",
        "Funnel account",
        (
            Variant(
                "interstate_deposits_rapid_withdrawal",
                (
                    "{account} receives {cash|currency} deposits in several states, far from the "
                    "account's home branch, followed by withdrawals in {jur}.",
                    "Deposits made by unknown persons in distant cities are withdrawn within a day near "
                    "the border.",
                    "The account functions as a funnel: credits arrive in many geographic locations "
                    "and the balance is drained at a single location.",
                    "Out-of-area deposits totalling {amount} were followed by ATM withdrawals of almost "
                    "the same value.",
                ),
                (
                    "one holding fed from lots of faraway regions then emptied quickly at one spot",
                    "sums lodged across the nation and taken back close to the frontier the next morning",
                    "scattered inflows from far-off regions converging then cleared",
                ),
            ),
        ),
    ),
    Typology(
        "trade_based_laundering",
        "Trade-based money laundering",
        (
            Variant(
                "invoice_mispricing",
                (
                    "Invoices from {cp} priced the goods well above market value; unit prices were "
                    "roughly {count} times comparable shipments.",
                    "Over-invoicing of {industry} goods shipped to {jur} moved {amount} more than the "
                    "declared value of the cargo.",
                    "The bill of lading describes a quantity that does not match the invoiced amount "
                    "paid by {subject}.",
                    "Under-invoiced exports were settled by a third party in {jur2}.",
                ),
                (
                    "paperwork for inbound merchandise with inflated costs versus true worth",
                    "exaggerated or deflated commercial charges to shift wealth abroad",
                    "import declarations and receipts that disagree with the true cost of products",
                ),
            ),
            Variant(
                "phantom_shipments",
                (
                    "Payments to {cp} for {industry} shipments with no evidence the goods were ever "
                    "dispatched.",
                    "Letters of credit referenced cargo that shipping records cannot locate; the "
                    "vessel named was not in port on the stated date.",
                    "The customer could not produce customs documentation for {count} export "
                    "transactions paid through {account}.",
                ),
                (
                    "paying for freight that never physically moved",
                    "fictitious consignments cited to justify overseas remittances",
                ),
            ),
        ),
    ),
    Typology(
        "shell_company",
        "Shell companies",
        (
            Variant(
                "no_operations",
                (
                    "{cp} is registered in {jur} with no employees, no website and a registered agent "
                    "address shared by hundreds of entities.",
                    "The corporate customer has no apparent business operations yet moved {amount} "
                    "through {account} in {days} days.",
                    "Beneficial ownership of {cp} is unclear; the directors are nominees.",
                    "Incorporation documents list a nominee director and a formation agent in {jur}.",
                ),
                (
                    "firm existing only on paper, without staff or premises, handling big sums",
                    "organisation with hidden proprietors and a mailbox as its headquarters",
                    "front corporation created offshore by a company factory with stand-in officers",
                ),
            ),
            Variant(
                "layered_entities",
                (
                    "Funds circulated among {count} related companies sharing the same director before "
                    "leaving to {jur}.",
                    "A chain of entities incorporated within weeks of each other exchanged payments "
                    "described only as consulting fees.",
                    "Intercompany loans between {cp} and affiliates have no supporting agreements.",
                ),
                (
                    "web of sister firms billing one another vague advisory charges",
                    "cascade of freshly formed corporations bouncing wealth to hide its origin",
                ),
            ),
        ),
    ),
    Typology(
        "rapid_movement",
        "Rapid movement of funds",
        (
            Variant(
                "pass_through_wires",
                (
                    "Incoming wires of {amount} were sent onward within hours, leaving a near-zero "
                    "balance in {account}.",
                    "Funds arrived from {jur} and were transferred out to {jur2} the same day with no "
                    "business purpose.",
                    "The account shows in-and-out activity: credits are immediately debited by outgoing "
                    "wires.",
                    "Velocity of funds through the account is inconsistent with the stated occupation.",
                ),
                (
                    "money landing and departing instantly, the holding always close to empty",
                    "transit holding serving purely as a conduit for quick remittances elsewhere",
                    "receipts relayed abroad shortly after arrival",
                ),
            ),
            Variant(
                "mule_account",
                (
                    "{subject} appears to be a money mule: recently opened account, large inbound "
                    "transfers from strangers, immediate outbound payments.",
                    "The customer admitted being recruited online to receive and forward payments for "
                    "a commission.",
                    "Inbound payments from {count} unrelated senders were forwarded to {cp} within a day.",
                ),
                (
                    "young person hired on social media to let others use their bank details for a fee",
                    "youngster given a cut for relaying other people's proceeds",
                ),
            ),
        ),
    ),
    Typology(
        "crypto_mixing",
        "Virtual asset mixing",
        (
            Variant(
                "mixer_exposure",
                (
                    "Blockchain analytics show the bitcoin received by {subject} passed through a "
                    "mixing service before reaching the exchange.",
                    "Wallet screening flagged direct exposure to a tumbler; {amount} in crypto "
                    "was converted to fiat and wired to {account}.",
                    "Transactions were routed through coin-join transactions and privacy wallets to "
                    "obscure the trail.",
                    "The virtual asset service provider reported withdrawals to addresses linked to a mixer.",
                ),
                (
                    "digital tokens scrambled in an anonymising pool prior to selling them",
                    "tokens laundered via an obfuscation protocol then sold for dollars",
                    "on-chain path deliberately blurred prior to a sale for regular money",
                ),
            ),
            Variant(
                "peer_to_peer_exchange",
                (
                    "{subject} operates as an unregistered peer-to-peer exchanger, buying crypto for "
                    "cash from {count} counterparties.",
                    "Frequent transfers from virtual currency platforms followed by cash withdrawals "
                    "suggest unlicensed exchange activity.",
                    "Privacy coins were swapped into stablecoins before deposit to the platform.",
                ),
                (
                    "individual informally dealing digital tokens for banknotes, no permit",
                    "unofficial over-the-counter dealer of cryptographic assets",
                ),
            ),
        ),
    ),
    Typology(
        "elder_exploitation",
        "Elder financial exploitation",
        (
            Variant(
                "caregiver_abuse",
                (
                    "The {age}-year-old customer's savings were depleted by {amount} after a caregiver "
                    "was added as a joint holder.",
                    "A relative holding power of attorney made large withdrawals from the elderly "
                    "customer's account for personal expenses.",
                    "Branch staff reported that the customer appeared confused and was accompanied by a "
                    "caregiver who did all the talking.",
                    "Cheques payable to the caregiver increased sharply after the customer's diagnosis.",
                ),
                (
                    "grandmother's pension emptied by the person meant to mind her",
                    "vulnerable senior whose helper controls and spends the retirement pot",
                    "nephew with legal authority plundering an aged man's nest egg",
                ),
            ),
            Variant(
                "romance_scam",
                (
                    "The elderly customer sent {count} wires to {jur} to a person met online who "
                    "claimed to need money for medical bills.",
                    "The customer believes she is in a relationship with someone she has never met and "
                    "has sent {amount} overseas.",
                    "Wires to a new beneficiary abroad started after the customer described an online "
                    "romance.",
                ),
                (
                    "pensioner remitting a nest egg to a sweetheart from a dating app",
                    "lonely retiree duped by a fake suitor into paying a foreign stranger",
                ),
            ),
        ),
    ),
    Typology(
        "human_trafficking",
        "Human trafficking proceeds",
        (
            Variant(
                "adult_services",
                (
                    "Payments to online classified sites for adult services and frequent late-night "
                    "hotel charges in {count} cities.",
                    "The account pays rent for several apartments and buys prepaid cards, consistent "
                    "with indicators of sex trafficking.",
                    "Multiple young women list the same address and phone number as {subject}.",
                    "Transactions show nail salon payroll in cash, hotel stays and escort website "
                    "advertising.",
                ),
                (
                    "exploitation of victims in commercial prostitution, with motel bills and web ads",
                    "pimping operation funding lodging and internet listings in many towns",
                ),
            ),
            Variant(
                "forced_labour",
                (
                    "{cp} pays workers in cash and withholds their wages; the workers' accounts are "
                    "controlled by one person.",
                    "Several employee accounts list the same mobile number and receive salary that is "
                    "immediately transferred to {subject}.",
                    "Recruitment fees charged to foreign workers from {jur} are deducted from payroll.",
                ),
                (
                    "migrants in debt bondage whose earnings are confiscated by their boss",
                    "labourers held in servitude with earnings seized by a gangmaster",
                ),
            ),
        ),
    ),
    Typology(
        "real_estate",
        "Real-estate laundering",
        (
            Variant(
                "all_cash_purchase",
                (
                    "{subject} bought a property in {jur} for {amount} in an all-cash purchase through "
                    "a limited liability company.",
                    "The residential purchase was funded by a wire from {cp}, an LLC with no disclosed "
                    "owner, and closed through a title company.",
                    "The condo was bought without a mortgage and resold within {days} days at a "
                    "significant loss.",
                    "Escrow funds came from multiple third parties not named on the deed.",
                ),
                (
                    "luxury flat acquired outright by an anonymous vehicle, no home loan",
                    "house acquired with dirty money and flipped quickly, taking a hit",
                    "dwelling acquisition settled in full by unnamed backers via a conveyancer",
                ),
            ),
            Variant(
                "rental_income_layering",
                (
                    "Reported rental income for {count} properties exceeds plausible market rents.",
                    "Tenants pay rent in cash far above the lease amounts recorded.",
                    "Mortgage repayments are made early with lump sums of unexplained origin.",
                ),
                (
                    "landlord declaring implausible lettings revenue to legitimise dirty money",
                    "home loan settled ahead of schedule with mysterious large injections",
                ),
            ),
        ),
    ),
    Typology(
        "casino_gambling",
        "Casino and gambling",
        (
            Variant(
                "minimal_play",
                (
                    "{subject} bought chips for {amount} in cash, played minimally, and redeemed them "
                    "for a casino cheque.",
                    "Chip walking and minimal gaming activity were noted; the patron asked for winnings "
                    "to be wired to {account}.",
                    "Front money was deposited at the cage and withdrawn after little or no wagering.",
                    "The patron's gaming losses are small relative to the cash brought to the casino.",
                ),
                (
                    "gambler exchanging banknotes for tokens, barely betting, then leaving with a bank draft",
                    "punter converting wealth at the gambling hall with negligible stakes",
                ),
            ),
            Variant(
                "online_betting",
                (
                    "Frequent deposits to online betting accounts from {account} and withdrawals "
                    "credited back without meaningful losses.",
                    "Multiple sportsbook accounts funded with prepaid cards were cashed out to {subject}.",
                    "Winnings claimed from online gaming platforms do not match the stakes placed.",
                ),
                (
                    "internet wagering portals exploited to recycle proceeds while hardly losing",
                    "web bookmaker e-purses topped up and emptied to one person",
                ),
            ),
        ),
    ),
    Typology(
        "correspondent_nested",
        "Correspondent banking / nested accounts",
        (
            Variant(
                "nested_correspondent",
                (
                    "The respondent bank in {jur} is processing payments for downstream banks not "
                    "disclosed to us, a nested correspondent relationship.",
                    "Wires through the correspondent account originate from institutions that are not "
                    "our direct respondents.",
                    "Payable-through activity: customers of the respondent in {jur} are initiating "
                    "payments directly through the account.",
                    "The respondent's due diligence questionnaire omits its own correspondent "
                    "relationships in {jur2}.",
                ),
                (
                    "foreign lender secretly clearing for other lenders via our vostro",
                    "hidden third-tier lenders piggybacking on an overseas partner's link to our clearing",
                    "cross-border clearing arrangement abused by concealed intermediary lenders",
                ),
            ),
        ),
    ),
    Typology(
        "sanctions_evasion",
        "Sanctions evasion",
        (
            Variant(
                "front_companies",
                (
                    "Payments to {cp} in {jur} appear to benefit an entity on the sanctions list "
                    "through a front company.",
                    "Ownership research shows a designated person holds 50 percent of {cp} through "
                    "relatives.",
                    "Wire references were altered to remove the name of the sanctioned beneficiary.",
                    "Goods shipped to {jur} are dual-use items transshipped to a sanctioned country.",
                ),
                (
                    "trading with blacklisted regimes via intermediaries to get around embargoes",
                    "proxy firms concealing a blacklisted oligarch behind the deal",
                    "scrubbing payee details from SWIFT messages to slip past OFAC checks",
                ),
            ),
            Variant(
                "vessel_transshipment",
                (
                    "The vessel carrying the cargo turned off its transponder near {jur} and performed "
                    "a ship-to-ship transfer.",
                    "Bills of lading list a port in {jur2} but satellite data places the tanker near a "
                    "sanctioned port.",
                ),
                (
                    "oil carrier going dark at sea and handing crude over mid-ocean to hide its origin",
                    "maritime deception with AIS disabled during a mid-ocean handover",
                ),
            ),
        ),
    ),
)


INDUSTRIES: tuple[str, ...] = (
    "used car dealership",
    "import-export",
    "restaurant",
    "construction",
    "jewellery retail",
    "money services business",
    "real estate brokerage",
    "consulting",
    "freight forwarding",
    "nail salon",
    "convenience store",
    "electronics wholesale",
    "agricultural commodities",
    "software development",
)

OCCUPATIONS: tuple[str, ...] = (
    "self-employed contractor",
    "retired teacher",
    "student",
    "restaurant owner",
    "truck driver",
    "real estate agent",
    "software engineer",
    "unemployed",
    "car salesman",
    "nurse",
    "company director",
    "freelance consultant",
)
