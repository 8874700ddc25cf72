// The authorization simulation: the same request sent with a flawed credential and with the
// signed-in user's own token, each shown with its HTTP status, `WWW-Authenticate` challenge and
// the audit record the server wrote for it (fetched live from the audit view).

import { el, rawJson } from "./dom.js";

const SEARCH = { name: "search_aml_notes", arguments: { query: "cash deposits under the reporting threshold", top_k: 1 } };
const WAIT_FOR_RECORD_MS = 8000;

export const CASES = [
  { kind: "wrong_audience", label: "Token for another server" },
  { kind: "expired", label: "Expired token" },
  { kind: "no_scope", label: "Token lacking the scope" },
  { kind: "no_token", label: "No token" },
  { kind: "other_bank", label: "Another bank reads your task" },
];

export class Simulation {
  constructor({ client, audit, session, claims, lastTask, output, report }) {
    Object.assign(this, { client, audit, session, claims, lastTask, output, report });
    this.tokens = null;
  }

  async flawedTokens() {
    if (this.tokens) return this.tokens;
    const response = await fetch("/lab/api/simulation", { method: "POST",
      headers: { authorization: `Bearer ${this.session.accessToken}` } });
    if (!response.ok) throw new Error(`the simulation's tokens were refused (HTTP ${response.status})`);
    const body = await response.json();
    this.tokens = Object.fromEntries(body.tokens.map((token) => [token.kind, token]));
    return this.tokens;
  }

  async run(kind) {
    const label = CASES.find((c) => c.kind === kind).label;
    let request = ["tools/call", SEARCH];
    if (kind === "other_bank") {
      const taskId = this.lastTask();
      if (!taskId) { this.report("Start a task first: this case reads your latest task with another bank's token."); return; }
      request = ["tasks/get", { taskId }];
    }
    let flawed = null;
    let flaw = "the request carries no Authorization header";
    if (kind !== "no_token") {
      const tokens = await this.flawedTokens();
      flawed = tokens[kind];
      flaw = flawed.flaw;
    }
    const since = await this.auditHead();
    const [bad, good] = [
      await this.client.exchange(request[0], request[1], { token: flawed ? flawed.token : null }),
      await this.client.exchange(request[0], request[1]),
    ];
    const panel = el("article", { class: "side-by-side", dataset: { case: kind } },
      el("h3", { class: "visually-hidden" }, label),
      this.column(`${label}: ${flaw}`, bad, "flawed"),
      this.column("The same request with your token", good, "valid"));
    this.output.prepend(panel);
    const records = panel.querySelectorAll(".audit-record");
    this.fillRecord(records[0], since, (event) => (flawed ? mentions(event, flawed.tokenId)
      : event.reason === "no_token" && event.method === request[0]));
    this.fillRecord(records[1], since, (event) => mentions(event, this.claims.jti) && event.method === request[0]);
  }

  column(title, exchange, which) {
    const error = exchange.message?.error;
    const outcome = error ? `JSON-RPC error ${error.code}: ${error.message}` : (exchange.message?.result ? "result returned" : "");
    return el("div", { dataset: { side: which } },
      el("h4", {}, title),
      el("p", {}, "HTTP ", el("strong", { class: "http-status" }, exchange.status), outcome ? ` — ${outcome}` : ""),
      el("p", {}, "WWW-Authenticate: ", el("code", { class: "challenge" }, exchange.challenge || "(none)")),
      el("div", { class: "audit-record" }, el("p", { class: "hint" }, "Waiting for the audit record…")),
      rawJson(exchange.message, "Response body"));
  }

  async auditHead() {
    try {
      const page = await this.audit.fetch(0);
      return page.events.reduce((max, event) => Math.max(max, event.seq), 0);
    } catch {
      return 0;
    }
  }

  async fillRecord(node, since, matches) {
    const deadline = Date.now() + WAIT_FOR_RECORD_MS;
    for (;;) {
      let page;
      try {
        page = await this.audit.fetch(since);
      } catch (error) {
        node.replaceChildren(el("p", { class: "hint" }, `Audit record not readable: ${error.message}`));
        return;
      }
      const event = page.events.find(matches);
      if (event) {
        node.replaceChildren(el("p", {}, "Audit: ",
          el("strong", { class: `decision-${event.decision}` }, event.decision), ` (${event.reason})`,
          ` · #${event.seq} · ${event.time}`), rawJson(event, "Audit record"));
        node.dataset.decision = event.decision;
        node.dataset.reason = event.reason;
        return;
      }
      if (Date.now() > deadline) {
        node.replaceChildren(el("p", { class: "hint" }, "No audit record of this request is visible to your bank."));
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 400));
    }
  }
}

function mentions(event, tokenId) {
  return event.token_id === tokenId || event.detail?.unverified?.jti === tokenId;
}
