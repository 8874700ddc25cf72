// The Tasks timeline: one row per task this page started, its state following the server live.
// One listen stream follows every open task (restarted when a task is added); if listening fails,
// the page polls `tasks/get` at the task's `pollIntervalMs` instead. Tasks are never listed: the
// server has no list call, and the page shows only the handles it was given.

import { el, rawJson, time } from "./dom.js";
import { schemaForm } from "./forms.js";
import { renderResult } from "./results.js";

const TERMINAL = new Set(["completed", "failed", "cancelled"]);

export class TaskTimeline {
  constructor(client, tbody, modeLabel, report) {
    this.client = client;
    this.tbody = tbody;
    this.modeLabel = modeLabel;
    this.report = report;
    this.tasks = new Map();
    this.stream = null;
    this.pollTimer = null;
  }

  add(tool, created) {
    const task = { id: created.taskId, tool, status: null, transitions: [], pollMs: created.pollIntervalMs || 1000,
      row: null, answered: new Set() };
    this.tasks.set(task.id, task);
    task.row = el("tr", { dataset: { taskId: task.id } });
    this.tbody.prepend(task.row);
    this.update(task.id, created);
    this.follow();
  }

  open() {
    return [...this.tasks.values()].filter((task) => !TERMINAL.has(task.status)).map((task) => task.id);
  }

  follow() {
    this.stream?.abort();
    clearTimeout(this.pollTimer);
    const ids = this.open();
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
    this.modeLabel.textContent = ids.length ? "polling" : "not following";
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

  stop() {
    this.stream?.abort();
    clearTimeout(this.pollTimer);
  }

  update(id, state) {
    const task = this.tasks.get(id);
    if (!task || !state?.status) return;
    if (TERMINAL.has(task.status)) return; // terminal states never change
    if (state.status !== task.status) {
      task.transitions.push({ status: state.status, at: Date.now(), message: state.statusMessage });
    }
    const finished = !TERMINAL.has(task.status) && TERMINAL.has(state.status);
    task.status = state.status;
    task.state = state;
    this.render(task);
    if (finished) this.follow();
  }

  render(task) {
    const state = task.state;
    const actions = [];
    if (!TERMINAL.has(task.status)) {
      actions.push(el("button", { type: "button", class: "cancel", "aria-label": `Cancel task ${task.id.slice(0, 8)}`,
        onclick: () => this.cancel(task) }, "Cancel"));
    }
    let detail = null;
    if (task.status === "input_required" && state.inputRequests) detail = this.inputForms(task, state.inputRequests);
    else if (task.status === "completed" && state.result) detail = renderResult(state.result);
    else if (task.status === "failed" && state.error) detail = el("p", { class: "decision-deny" }, `${state.error.code}: ${state.error.message}`);
    task.row.replaceChildren(
      el("td", {}, el("code", { title: task.id }, `${task.id.slice(0, 10)}…`)),
      el("td", {}, task.tool),
      el("td", {}, el("span", { class: `state state-${task.status}`, dataset: { state: task.status } }, task.status),
        state.statusMessage ? el("div", { class: "hint" }, state.statusMessage) : null),
      el("td", {}, el("ol", { class: "timeline" }, task.transitions.map((step) =>
        el("li", {}, `${time(step.at)} ${step.status}`, step.message ? ` — ${step.message}` : ""))),
        detail, rawJson(state, "Task state")),
      el("td", {}, actions));
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
      this.render(task);
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
