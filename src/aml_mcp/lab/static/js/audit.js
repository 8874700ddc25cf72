// The audit view: the caller's bank's audit trail, newest first, filterable, polled for new events.

import { el } from "./dom.js";

const POLL_MS = 3000;

export class AuditView {
  constructor(token, tbody, note, form) {
    this.token = token;
    this.tbody = tbody;
    this.note = note;
    this.form = form;
    this.last = 0;
    this.timer = null;
    this.stopped = false;
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.restart();
    });
  }

  filters() {
    const values = new FormData(this.form);
    const query = new URLSearchParams();
    for (const name of ["decision", "subject", "method"]) {
      const value = String(values.get(name) || "").trim();
      if (value) query.set(name, value);
    }
    return query;
  }

  /** One page of events after `after` (all filters applied); throws with the HTTP status when refused. */
  async fetch(after, filters = new URLSearchParams()) {
    const query = new URLSearchParams(filters);
    query.set("after", String(after));
    const response = await fetch(`/lab/api/audit?${query}`, { headers: { authorization: `Bearer ${this.token}` } });
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const error = new Error(body?.error?.message || body?.error || `HTTP ${response.status}`);
      error.status = response.status;
      error.challenge = response.headers.get("www-authenticate");
      throw error;
    }
    return body;
  }

  restart() {
    this.last = 0;
    this.tbody.replaceChildren();
    clearTimeout(this.timer);
    this.tick();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  async tick() {
    if (this.stopped) return;
    try {
      const page = await this.fetch(this.last, this.filters());
      this.note.textContent = `Events of ${page.tenant}, updating every ${POLL_MS / 1000} s.`;
      for (const event of page.events) {
        this.last = Math.max(this.last, event.seq);
        this.tbody.prepend(row(event));
      }
    } catch (error) {
      this.note.textContent = error.status === 403
        ? `The audit view needs a token with its scope (${error.message}).`
        : `Audit view unavailable: ${error.message}`;
      if (error.status === 401 || error.status === 403) return;
    }
    this.timer = setTimeout(() => this.tick(), POLL_MS);
  }
}

export function row(event) {
  return el("tr", { dataset: { seq: event.seq, decision: event.decision } },
    el("td", {}, event.seq),
    el("td", {}, event.time),
    el("td", { class: `decision-${event.decision}` }, event.decision),
    el("td", {}, event.reason),
    el("td", {}, event.subject ?? event.detail?.unverified?.sub ?? "—"),
    el("td", {}, event.client_id ?? "—"),
    el("td", {}, event.method ?? "—"),
    el("td", {}, event.target ?? "—"));
}
