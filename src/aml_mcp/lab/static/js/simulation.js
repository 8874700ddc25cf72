// The authorization simulation: a request sent with a flawed credential and the same request with
// the signed-in user's own token, each shown with its HTTP status, `WWW-Authenticate` challenge and
// the audit record the server wrote for it. The flawed request is built and sent by the server
// itself (`POST /lab/api/simulation`): the page names the case and gets back only what the server
// answered and recorded — never the flawed credential.

import { el, rawJson } from "./dom.js";

const SEARCH = { name: "search_aml_notes", arguments: { query: "cash deposits under the reporting threshold", top_k: 1 } };
const WAIT_FOR_RECORD_MS = 8000;
const SETTLE_MS = 1500;

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
  }

  /** Runs one case on the server: `{flaw, request, status, challenge, message, audit}`. */
  async flawed(kind, taskId) {
    const response = await fetch("/lab/api/simulation", { method: "POST",
      headers: { authorization: `Bearer ${this.session.accessToken}`, "content-type": "application/json" },
      body: JSON.stringify(taskId ? { case: kind, taskId } : { case: kind }) });
    const body = await response.json().catch(() => null);
    if (!response.ok) throw new Error(`the simulation was refused (HTTP ${response.status}${body?.error ? `: ${body.error}` : ""})`);
    return body;
  }

  async run(kind) {
    const label = CASES.find((c) => c.kind === kind).label;
    let request = ["tools/call", SEARCH];
    let taskId = null;
    if (kind === "other_bank") {
      taskId = this.lastTask();
      if (!taskId) { this.report("Start a task first: this case reads your latest task with another bank's token."); return; }
      request = ["tasks/get", { taskId }];
    }
    const bad = await this.flawed(kind, taskId);
    const since = await this.auditHead();
    const good = await this.client.exchange(request[0], request[1]);
    const panel = el("article", { class: "side-by-side", dataset: { case: kind } },
      el("h3", { class: "visually-hidden" }, label),
      this.column(`${label}: ${bad.flaw}`, bad, "flawed"),
      this.column("The same request with your token", good, "valid"));
    this.output.prepend(panel);
    const records = panel.querySelectorAll(".audit-record");
    this.showRecords(records[0], bad.audit, bad.audit.find((event) => event.decision === "deny"));
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

  /**
   * Shows every audit record of the request (the gate's and, for a task method, the handler's),
   * polling until a refusal is among them or, for an admitted request, a moment after the first.
   */
  async fillRecord(node, since, matches) {
    const deadline = Date.now() + WAIT_FOR_RECORD_MS;
    let settleBy = null;
    for (;;) {
      let page;
      try {
        page = await this.audit.fetch(since);
      } catch (error) {
        node.replaceChildren(el("p", { class: "hint" }, `Audit record not readable: ${error.message}`));
        return;
      }
      const found = page.events.filter(matches);
      const refusal = found.find((event) => event.decision === "deny");
      if (found.length && settleBy === null) settleBy = Date.now() + SETTLE_MS;
      if (refusal || (found.length && Date.now() >= settleBy) || Date.now() > deadline) {
        this.showRecords(node, found, refusal);
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
  }

  showRecords(node, found, refusal) {
    if (!found.length) {
      node.replaceChildren(el("p", { class: "hint" }, "No audit record of this request is visible to your bank."));
      return;
    }
    node.replaceChildren(el("ul", { class: "records" }, found.map((event) =>
      el("li", {}, "Audit: ", el("strong", { class: `decision-${event.decision}` }, event.decision),
        ` (${event.reason}) · ${event.method ?? "no method"} · #${event.seq} · ${event.time}`,
        rawJson(event, "Audit record")))));
    const shown = refusal || found[found.length - 1];
    node.dataset.decision = shown.decision;
    node.dataset.reason = shown.reason;
  }
}

function mentions(event, tokenId) {
  return event.token_id === tokenId;
}
