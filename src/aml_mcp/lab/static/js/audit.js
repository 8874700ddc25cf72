// The audit view: the caller's bank's audit trail, newest first, polled for new events. Consecutive
// records of one decision fold into one row with a count and the span of their times (a polling
// client is one row counting up); decision, subject and method filter on the server, the task
// filter here. A token without the view's scope never asks for it: the page says why instead.

import { AuditFolds, aboutTask } from "./audit-fold.js";
import { el, isoTime } from "./dom.js";

const POLL_MS = 3000;
const KEPT_EVENTS = 5000;
const SHOWN_ROWS = 300;
const SERVER_FILTERS = ["decision", "subject", "method"];

export class AuditRefused extends Error {}

export class AuditView {
  /**
   * `allowed` says whether the token grants the view's scope; without it nothing is fetched and
   * `why` is shown instead.
   */
  constructor(token, { tbody, note, form, allowed, why, scope }) {
    Object.assign(this, { token, tbody, note, form, allowed, why, scope });
    this.last = 0;
    this.timer = null;
    this.stopped = false;
    this.events = [];
    this.rows = new Map();
    this.folds = new AuditFolds();
    this.serverQuery = "";
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.applyFilters();
    });
    form.elements.namedItem("task")?.addEventListener("input", () => this.refold());
  }

  filters() {
    const values = new FormData(this.form);
    const query = new URLSearchParams();
    for (const name of SERVER_FILTERS) {
      const value = String(values.get(name) || "").trim();
      if (value) query.set(name, value);
    }
    return query;
  }

  taskFilter() {
    return String(new FormData(this.form).get("task") || "").trim();
  }

  /** Shows only the records of task `taskId` (from a task card's "Audit records"). */
  showTask(taskId) {
    this.form.elements.namedItem("task").value = taskId;
    this.refold();
  }

  /** One page of events after `after` (all filters applied); throws with the HTTP status when refused. */
  async fetch(after, filters = new URLSearchParams()) {
    if (!this.allowed) throw new AuditRefused(this.why);
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

  start() {
    if (!this.allowed) {
      this.form.hidden = true;
      this.tbody.closest(".table-wrap").hidden = true;
      this.note.textContent = this.why;
      this.note.dataset.hidden = "true";
      return;
    }
    this.restart();
  }

  applyFilters() {
    if (this.filters().toString() !== this.serverQuery) this.restart();
    else this.refold();
  }

  restart() {
    this.serverQuery = this.filters().toString();
    this.last = 0;
    this.events = [];
    clearTimeout(this.timer);
    this.refold();
    this.tick();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** Folds every kept record again (the task filter changed, or the server filters did). */
  refold() {
    const task = this.taskFilter();
    this.folds = new AuditFolds();
    this.rows = new Map();
    this.tbody.replaceChildren();
    for (const event of this.events) if (aboutTask(event, task)) this.place(this.folds.add(event));
    this.trim();
  }

  place({ group, created }) {
    if (created) {
      const row = el("tr");
      this.rows.set(group, row);
      this.tbody.prepend(row);
    }
    fill(this.rows.get(group), group);
  }

  trim() {
    while (this.tbody.rows.length > SHOWN_ROWS) this.tbody.lastElementChild.remove();
  }

  async tick() {
    if (this.stopped) return;
    try {
      const page = await this.fetch(this.last, this.filters());
      const task = this.taskFilter();
      for (const event of page.events) {
        if (event.seq <= this.last) continue;
        this.last = event.seq;
        this.events.push(event);
        if (aboutTask(event, task)) this.place(this.folds.add(event));
      }
      if (this.events.length > KEPT_EVENTS) this.events.splice(0, this.events.length - KEPT_EVENTS);
      this.trim();
      this.note.textContent = `Events of ${page.tenant}, newest first, updating every ${POLL_MS / 1000} s; `
        + "consecutive records of the same decision are folded into one row with their count.";
    } catch (error) {
      this.note.textContent = error.status === 403
        ? `The audit view needs a token with its scope (${error.message}).`
        : `Audit view unavailable: ${error.message}`;
      if (error.status === 401 || error.status === 403) return;
    }
    this.timer = setTimeout(() => this.tick(), POLL_MS);
  }
}

function cell(column, ...content) {
  return el("td", { dataset: { col: column } }, ...content);
}

/** The time of a row (its span, for a fold): UTC, as the column's heading says. */
function span(group) {
  const first = isoTime(group.first.time);
  const last = isoTime(group.last.time);
  const day = first.slice(0, 10);
  if (group.count === 1 || first === last) return el("time", { title: first }, first.slice(11, 19));
  return el("span", { title: `${first} to ${last}` },
    el("time", {}, first.slice(11, 19)), "–", el("time", {}, last.slice(0, 10) === day ? last.slice(11, 19) : last.slice(0, 19)));
}

/** One row: a single record, or a fold of `count` consecutive records of the same decision. */
function fill(row, group) {
  const event = group.last;
  const seq = group.count === 1 ? `${event.seq}` : `${group.first.seq}–${event.seq}`;
  row.dataset.seq = event.seq;
  row.dataset.method = event.method ?? "";
  row.dataset.decision = event.decision;
  row.dataset.count = group.count;
  row.className = group.count > 1 ? "folded" : "";
  row.replaceChildren(
    cell("seq", seq),
    cell("time", span(group)),
    cell("count", group.count > 1 ? el("span", { class: "count", title: `${group.count} consecutive records` }, `×${group.count}`) : ""),
    cell("decision", el("span", { class: `decision-${event.decision}` }, event.decision)),
    cell("reason", event.reason),
    cell("subject", event.subject ?? event.detail?.unverified?.sub ?? "—"),
    cell("client", event.client_id ?? "—"),
    cell("method", event.method ?? "—"),
    cell("target", event.target ?? "—"));
}
