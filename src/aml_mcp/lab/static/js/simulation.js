// The authorization simulation, drawn as the flow of the design: a call without a token answered
// 401 with the resource's metadata, the authorization server, a token bound to this server's
// audience, the call, and the server's checks (issuer, audience, validity, scope) before the
// handler. Each case sends one request with a deliberately wrong credential; the step where its
// credential went wrong is marked, the check that refused it is lit, and the audit record the server
// wrote for the refusal sits beside that check — next to the same request with the user's own token.
// The flawed request is built and sent by the server itself (`POST /lab/api/simulation`): the page
// names the case and gets back only what the server answered and recorded, never the credential.

import { el, isoTime, rawJson } from "./dom.js";
import { STEPS, outcomes } from "./flow.js";

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

const MARK = { passed: "✓", flawed: "!", refused: "✗", answered: "✓", unreached: "·" };
const SAID = {
  passed: "passed", flawed: "the flaw", refused: "refused here", answered: "answered", unreached: "not reached",
};
/** Before the call, the simulation's token stands in for the client's steps (the server signed it). */
const SAID_BEFORE_CALL = { passed: "as designed" };

export class Simulation {
  /**
   * `canCompare(method)` says whether the user's own token may make the comparison request (the page
   * sends no request its scopes cannot make); `audit` reads the comparison's record when allowed.
   */
  constructor({ client, audit, session, claims, lastTask, output, report, canCompare }) {
    Object.assign(this, { client, audit, session, claims, lastTask, output, report, canCompare });
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
    this.report(`Running “${label}”…`);
    const bad = await this.flawed(kind, taskId);
    const compare = this.canCompare(request[0], request[1]);
    const since = compare && this.audit.allowed ? await this.auditHead() : 0;
    const good = compare ? await this.client.exchange(request[0], request[1]) : null;
    const { steps, refused } = outcomes(kind, bad.audit, bad.status);
    const refusedTitle = STEPS.find((s) => s.step === refused)?.title ?? "nowhere";
    for (const older of this.output.querySelectorAll("details.simulation[open]")) older.open = false;
    const valid = el("div", { class: "valid", dataset: { side: "valid" } });
    const panel = el("article", { class: "simulation-case", dataset: { case: kind, refusedStep: refused ?? "" } },
      el("details", { class: "simulation", open: true },
        el("summary", {},
          el("strong", {}, label), " — refused at ", el("strong", {}, refusedTitle),
          ` · HTTP ${bad.status}`),
        el("p", { class: "flaw" }, el("strong", {}, "What is wrong: "), `${bad.flaw}. `,
          el("span", { class: "hint" }, `The server sent ${bad.request.method} with it to its own /mcp and reports what happened.`)),
        el("div", { class: "flow-wrap", dataset: { side: "flawed" } },
          el("ol", { class: "flow", "aria-label": `The authorization flow for “${label}”` },
            STEPS.map((s) => this.step(s, steps[s.step], bad))),
          this.answer(bad)),
        valid));
    this.output.prepend(panel);
    this.fillValid(valid, good, since, request[0]);
    this.report(`“${label}”: refused at ${refusedTitle} (HTTP ${bad.status}).`);
  }

  step(spec, { outcome, records }, bad) {
    const lit = outcome === "refused";
    const notes = [];
    if (outcome === "flawed") notes.push(el("p", { class: "flaw-note" }, bad.flaw));
    if (lit) {
      const error = bad.message?.error;
      notes.push(el("p", { class: "verdict" }, "HTTP ", el("strong", { class: "http-status" }, bad.status),
        error ? ` — JSON-RPC error ${error.code}: ${error.message}` : ""));
      if (bad.challenge) notes.push(el("p", { class: "challenge-line" }, "WWW-Authenticate: ", el("code", { class: "challenge" }, bad.challenge)));
    }
    for (const record of records) notes.push(auditCard(record));
    return el("li", { class: `step step-${outcome} part-${spec.part}`,
      dataset: lit ? { step: spec.step, outcome, lit: "refused" } : { step: spec.step, outcome } },
    el("span", { class: "step-mark", "aria-hidden": "true" }, MARK[outcome]),
    el("div", { class: "step-text", title: spec.detail },
      el("div", { class: "step-title" }, spec.title,
        el("span", { class: "step-said" }, ` — ${(spec.part === "client" && SAID_BEFORE_CALL[outcome]) || SAID[outcome]}`)),
      // What a step checks is spelled out where it matters: where the flaw is, and where it is caught.
      outcome === "flawed" || lit ? el("div", { class: "step-detail" }, spec.detail) : null),
    notes.length ? el("div", { class: "step-notes" }, notes) : null);
  }

  /** The flawed request's full answer, on demand. */
  answer(bad) {
    return el("div", { class: "answer" },
      el("p", { class: "hint" }, `${bad.audit.length} audit record${bad.audit.length === 1 ? "" : "s"} written for this request.`),
      rawJson(bad.message, "Response body"),
      rawJson(bad.request, "Request the server sent"));
  }

  async fillValid(node, good, since, method) {
    if (!good) {
      node.replaceChildren(el("p", { class: "hint" }, "Your token cannot make this request, so the page does not send it."));
      return;
    }
    const error = good.message?.error;
    const outcome = error ? `JSON-RPC error ${error.code}: ${error.message}` : (good.message?.result ? "result returned" : "");
    const record = el("div", { class: "records" });
    node.replaceChildren(
      el("h4", {}, "The same request with your token"),
      el("p", {}, "HTTP ", el("strong", { class: "http-status" }, good.status), outcome ? ` — ${outcome}` : "",
        good.status < 400 ? " (every check passed)" : ""),
      record);
    if (!this.audit.allowed) {
      record.replaceChildren(el("p", { class: "hint" },
        `Its audit record is in your bank's audit view, which needs ${this.audit.scope}: your token cannot read it, so the page does not ask.`));
      return;
    }
    record.replaceChildren(el("p", { class: "hint" }, "Waiting for the audit record…"));
    await this.fillRecord(record, since, (event) => event.token_id === this.claims.jti && event.method === method);
  }

  async auditHead() {
    try {
      const page = await this.audit.fetch(0);
      return page.events.reduce((max, event) => Math.max(max, event.seq), 0);
    } catch {
      return 0;
    }
  }

  /** The comparison request's records (the gate's and, for a task method, the handler's), polled
   * until a refusal is among them or, for an admitted request, a moment after the first. */
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
        showRecords(node, found, refusal);
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
  }
}

function auditCard(record) {
  const unverified = record.detail?.unverified;
  return el("div", { class: `audit-record audit-${record.decision}`, dataset: { decision: record.decision, reason: record.reason, seq: record.seq } },
    el("div", { class: "audit-head" }, "Audit record ", el("strong", {}, `#${record.seq}`), ": ",
      el("strong", { class: `decision-${record.decision}` }, record.decision), ` (${record.reason})`),
    el("div", { class: "audit-meta" }, [record.method ?? "no method", record.target, isoTime(record.time)].filter(Boolean).join(" · ")),
    el("div", { class: "audit-meta" }, record.subject
      ? `${record.subject} · ${record.tenant ?? "no bank"} · ${record.client_id ?? "no client"}`
      : "No verified identity: the token was refused before it could be trusted."),
    unverified ? el("div", { class: "audit-meta" }, "Unverified claims: ",
      Object.entries(unverified).filter(([key]) => ["aud", "iss", "sub", "exp", "scope"].includes(key))
        .map(([key, value]) => `${key}: ${Array.isArray(value) ? value.join(" ") : value}`).join(" · ")) : null,
    rawJson(record, "Audit record (JSON)"));
}

function showRecords(node, found, refusal) {
  if (!found.length) {
    node.replaceChildren(el("p", { class: "hint" }, "No audit record of this request is visible to your bank."));
    return;
  }
  node.replaceChildren(...found.map(auditCard));
  const shown = refusal || found[found.length - 1];
  node.dataset.decision = shown.decision;
  node.dataset.reason = shown.reason;
}
