// The Tasks view: one card per task this page started, its state following the server live. One
// listen stream follows every open task (restarted when a task is added); if listening fails, the
// page polls `tasks/get` at the task's `pollIntervalMs` instead. Each card draws the task's state
// machine (the current state lit, the transitions taken so far), a timeline with the time spent in
// each state and the status messages said in it, and the progress when the server reports it.
// Tasks are never listed: the server has no list call, and the page shows only the handles it was given.

import { duration, el, preciseClock, rawJson } from "./dom.js";
import { schemaForm } from "./forms.js";
import { renderResult } from "./results.js";
import { stateMachine } from "./statemachine.js";
import { TERMINAL, TaskHistory } from "./task-history.js";

const SHOWN_MESSAGES = 4;
const TICK_MS = 1000;

export class TaskTimeline {
  constructor(client, list, modeLabel, report, { onAudit = null } = {}) {
    this.client = client;
    this.list = list;
    this.modeLabel = modeLabel;
    this.report = report;
    this.onAudit = onAudit;
    this.tasks = new Map();
    this.stream = null;
    this.pollTimer = null;
    this.ticker = null;
  }

  add(tool, created) {
    const task = { id: created.taskId, tool, history: new TaskHistory(), pollMs: created.pollIntervalMs || 1000,
      answered: new Set(), parts: null, shownDetail: null };
    this.tasks.set(task.id, task);
    task.parts = this.card(task);
    this.list.querySelector(".empty")?.remove();
    this.list.prepend(task.parts.card);
    this.update(task.id, created);
    this.follow();
  }

  open() {
    return [...this.tasks.values()].filter((task) => !task.history.terminal).map((task) => task.id);
  }

  follow() {
    this.stream?.abort();
    clearTimeout(this.pollTimer);
    const ids = this.open();
    this.tick();
    if (!ids.length) { this.modeLabel.textContent = "not following"; return; }
    const controller = new AbortController();
    this.stream = controller;
    this.modeLabel.textContent = `listening for ${ids.length} task${ids.length > 1 ? "s" : ""}`;
    this.client.listen({ taskIds: ids }, (message) => {
      if (message.method === "notifications/tasks") this.update(message.params.taskId, message.params);
    }, controller.signal).then((closed) => {
      if (controller.signal.aborted) return;
      const reason = closed?._meta?.["aml-mcp/closeReason"];
      this.report(`Listen stream closed${reason ? `: ${reason}` : ""}; polling instead.`);
      this.poll();
    }).catch((error) => {
      if (controller.signal.aborted) return;
      this.report(`Listening failed (${error.message}); polling instead.`);
      this.poll();
    });
  }

  poll() {
    clearTimeout(this.pollTimer);
    const ids = this.open();
    this.modeLabel.textContent = ids.length ? "polling tasks/get" : "not following";
    if (!ids.length) return;
    const interval = Math.min(...ids.map((id) => this.tasks.get(id).pollMs));
    this.pollTimer = setTimeout(async () => {
      for (const id of ids) {
        try {
          this.update(id, await this.client.request("tasks/get", { taskId: id }));
        } catch (error) {
          this.report(`tasks/get ${id.slice(0, 8)}…: ${error.message}`);
        }
      }
      this.poll();
    }, interval);
  }

  /** While a task is open, its time in the current state counts up once a second. */
  tick() {
    const open = this.open().length > 0;
    if (open && this.ticker === null) {
      this.ticker = setInterval(() => {
        for (const task of this.tasks.values()) if (!task.history.terminal) this.drawHistory(task);
      }, TICK_MS);
    } else if (!open && this.ticker !== null) {
      clearInterval(this.ticker);
      this.ticker = null;
    }
  }

  stop() {
    this.stream?.abort();
    clearTimeout(this.pollTimer);
    clearInterval(this.ticker);
    this.ticker = null;
  }

  update(id, state) {
    const task = this.tasks.get(id);
    if (!task || !task.history.observe(state)) return;
    this.render(task);
    if (task.history.terminal) this.follow();
  }

  card(task) {
    const short = task.id.slice(0, 8);
    const parts = {
      state: el("span", { class: "state" }),
      progress: el("div", { class: "task-progress", "aria-live": "polite" }),
      actions: el("div", { class: "task-actions" }),
      machine: el("figure", { class: "machine" }),
      timeline: el("ol", { class: "timeline" }),
      detail: el("div", { class: "task-detail" }),
      raw: el("div", {}),
    };
    parts.card = el("article", { class: "task", dataset: { taskId: task.id }, "aria-label": `${task.tool} task ${short}` },
      el("header", { class: "task-head" },
        el("div", { class: "task-title" },
          el("strong", {}, task.tool),
          el("code", { class: "task-id", title: task.id }, `${short}…`),
          parts.state),
        parts.progress,
        parts.actions),
      el("div", { class: "task-body" },
        parts.machine,
        el("section", { class: "task-timeline", "aria-label": `Timeline of task ${short}` },
          el("h4", {}, "Timeline ", el("span", { class: "hint" }, "(UTC; time spent in each state)")),
          parts.timeline)),
      parts.detail,
      parts.raw);
    return parts;
  }

  render(task) {
    const { history } = task;
    const state = history.latest;
    const status = history.status;
    task.parts.card.dataset.status = status;
    task.parts.state.className = `state state-${status}`;
    task.parts.state.dataset.state = status;
    task.parts.state.textContent = status;
    this.drawProgress(task);
    this.drawHistory(task);
    // The detail (the questions' forms, the result) is redrawn only when it changes: a progress
    // message must not wipe an answer being typed.
    const detailKey = `${status} ${Object.keys(state.inputRequests || {}).join(" ")}`;
    if (detailKey !== task.shownDetail) this.drawDetail(task);
    task.shownDetail = detailKey;
    const actions = [];
    if (!history.terminal) {
      actions.push(el("button", { type: "button", class: "cancel", "aria-label": `Cancel task ${task.id.slice(0, 8)}`,
        onclick: () => this.cancel(task) }, "Cancel"));
    }
    if (this.onAudit) {
      actions.push(el("button", { type: "button", class: "link", onclick: () => this.onAudit(task.id) }, "Audit records"));
    }
    task.parts.actions.replaceChildren(...actions);
    task.parts.raw.replaceChildren(rawJson(state, "Task state (JSON)"));
  }

  drawProgress(task) {
    const { history } = task;
    const progress = history.progress;
    const message = history.latest?.statusMessage;
    const nodes = [];
    if (progress) {
      const label = progress.total ? `${progress.done} / ${progress.total}` : `${progress.done} done`;
      nodes.push(progress.total
        ? el("progress", { max: progress.total, value: progress.done, "aria-label": `Progress: ${label}` })
        : null,
      el("span", { class: "progress-count", dataset: { done: progress.done, total: progress.total ?? "" } }, label));
    }
    if (message && !history.terminal) nodes.push(el("span", { class: "progress-message" }, message));
    task.parts.progress.replaceChildren(...nodes);
  }

  drawHistory(task) {
    const { history } = task;
    const now = Date.now();
    task.parts.machine.replaceChildren(stateMachine(history, now),
      el("figcaption", { class: "hint" }, "Current state lit; transitions taken drawn solid."));
    task.parts.timeline.replaceChildren(...history.segments.map((segment) => {
      const spent = history.duration(segment, now);
      const open = segment.end === null && !history.terminal;
      const messages = segment.messages;
      const hidden = messages.length - SHOWN_MESSAGES;
      const line = (message) => el("li", {}, el("time", {}, preciseClock(message.at)), " ", message.text);
      return el("li", { dataset: { status: segment.status } },
        el("div", { class: "segment" },
          el("time", {}, preciseClock(segment.start)),
          el("span", { class: `state state-${segment.status}` }, segment.status),
          spent === null ? el("span", { class: "spent" }, "final")
            : el("span", { class: "spent" }, open ? `${duration(spent)} so far` : duration(spent))),
        messages.length ? el("ul", { class: "messages" },
          hidden + segment.dropped > 0 ? el("li", { class: "hint" }, `${hidden + segment.dropped} earlier message${hidden + segment.dropped > 1 ? "s" : ""}`) : null,
          messages.slice(-SHOWN_MESSAGES).map(line)) : null);
    }));
  }

  drawDetail(task) {
    const state = task.history.latest;
    let detail = null;
    if (task.history.status === "input_required" && state.inputRequests) detail = this.inputForms(task, state.inputRequests);
    else if (task.history.status === "completed" && state.result) detail = renderResult(state.result);
    else if (task.history.status === "failed" && state.error) detail = el("p", { class: "decision-deny" }, `${state.error.code}: ${state.error.message}`);
    task.parts.detail.replaceChildren(...(detail ? [detail] : []));
  }

  inputForms(task, requests) {
    return el("div", { class: "input-requests" }, Object.entries(requests).map(([key, request]) => {
      if (task.answered.has(key)) return el("p", { class: "hint" }, `Answered ${key}; waiting for the task.`);
      const params = request.params || {};
      return el("fieldset", {}, el("legend", {}, params.message || key),
        schemaForm(params.requestedSchema || { properties: {} }, "Answer", (content) =>
          this.answer(task, key, { action: "accept", content }),
        [el("button", { type: "button", onclick: () => this.answer(task, key, { action: "decline" }) }, "Decline")]));
    }));
  }

  async answer(task, key, response) {
    try {
      await this.client.request("tasks/update", { taskId: task.id, inputResponses: { [key]: response } });
      task.answered.add(key);
      this.drawDetail(task);
    } catch (error) {
      this.report(`tasks/update: ${error.message}`);
    }
  }

  async cancel(task) {
    try {
      await this.client.request("tasks/cancel", { taskId: task.id });
      this.report(`Cancellation of ${task.id.slice(0, 8)}… requested.`);
    } catch (error) {
      this.report(`tasks/cancel: ${error.message}`);
    }
  }
}
