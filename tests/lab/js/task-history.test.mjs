// What the page keeps of a task from the states it observes: the state machine and the timeline.
import assert from "node:assert/strict";
import { test } from "node:test";

import { TaskHistory, progressOf } from "../../../src/aml_mcp/lab/static/js/task-history.js";

const T0 = Date.parse("2026-07-28T10:00:00.000Z");
const at = (ms) => new Date(T0 + ms).toISOString();
const state = (status, ms, extra = {}) => ({ taskId: "t", status, lastUpdatedAt: at(ms), createdAt: at(0), ...extra });

test("a draft that asks: working, input_required, working, completed", () => {
  const history = new TaskHistory();
  history.observe(state("working", 0, { statusMessage: "reading 1 case(s)" }), T0);
  history.observe(state("input_required", 400, { statusMessage: "Waiting for input" }), T0 + 400);
  history.observe(state("working", 2400, { statusMessage: "Input received" }), T0 + 2400);
  history.observe(state("completed", 2900), T0 + 2900);
  assert.deepEqual(history.segments.map((s) => s.status), ["working", "input_required", "working", "completed"]);
  assert.deepEqual([...history.edgeCounts()], [["working>input_required", 1], ["input_required>working", 1], ["working>completed", 1]]);
  assert.equal(history.timeIn("working", T0 + 10_000), 400 + 500);
  assert.equal(history.timeIn("input_required", T0 + 10_000), 2000);
  assert.equal(history.duration(history.segments.at(-1)), null);
  assert.equal(history.terminal, true);
  // A terminal state never changes.
  assert.equal(history.observe(state("working", 3000), T0 + 3000), false);
});

test("progress messages while working are kept in order, each once, with their time", () => {
  const history = new TaskHistory();
  history.observe(state("working", 0, { statusMessage: "drafting 504 cases" }), T0);
  for (const [ms, done] of [[100, 34], [200, 34], [300, 108]]) {
    history.observe(state("working", ms, { statusMessage: `drafted ${done}/504`,
      _meta: { "aml-mcp/progress": { done, total: 504 } } }), T0 + ms);
  }
  const texts = history.segments[0].messages.map((m) => m.text);
  assert.deepEqual(texts, ["drafting 504 cases", "drafted 34/504", "drafted 108/504"]);
  assert.equal(history.segments[0].messages[1].at, T0 + 100);
  assert.deepEqual(history.progress, { done: 108, total: 504 });
});

test("without progress in _meta there is none, and a message alone still changes the timeline", () => {
  const history = new TaskHistory();
  assert.equal(history.observe(state("working", 0), T0), true);
  assert.equal(history.progress, null);
  assert.equal(history.observe(state("working", 50, { statusMessage: "grading" }), T0 + 50), true);
  assert.equal(history.observe(state("working", 60, { statusMessage: "grading" }), T0 + 60), false);
});

test("a state older than one already seen is ignored (a late poll answer)", () => {
  const history = new TaskHistory();
  history.observe(state("working", 0), T0);
  history.observe(state("input_required", 500), T0 + 500);
  assert.equal(history.observe(state("working", 100), T0 + 600), false);
  assert.equal(history.status, "input_required");
});

test("the open state counts up from the server's time, or from when the page saw it if the clocks differ", () => {
  const history = new TaskHistory();
  history.observe(state("working", 0), T0 + 300);
  assert.equal(history.duration(history.segments[0], T0 + 1000), 1000);
  const skewed = new TaskHistory();
  skewed.observe(state("working", 0), T0 + 60_000); // the browser's clock a minute ahead
  assert.equal(skewed.duration(skewed.segments[0], T0 + 61_000), 1000);
});

test("cancelled from input_required is a transition of its own", () => {
  const history = new TaskHistory();
  history.observe(state("working", 0), T0);
  history.observe(state("input_required", 10), T0 + 10);
  history.observe(state("cancelled", 20, { statusMessage: "Cancelled at the client's request" }), T0 + 20);
  assert.deepEqual(history.transitions().map((t) => `${t.from}>${t.to}`), ["working>input_required", "input_required>cancelled"]);
  assert.deepEqual(history.visited(), ["working", "input_required", "cancelled"]);
});

test("progress is read defensively", () => {
  const meta = (value) => ({ _meta: { "aml-mcp/progress": value } });
  assert.deepEqual(progressOf(meta({ done: 3, total: 10 })), { done: 3, total: 10 });
  assert.deepEqual(progressOf(meta({ done: 12, total: 10 })), { done: 10, total: 10 });
  assert.deepEqual(progressOf(meta({ done: 3 })), { done: 3, total: null });
  assert.equal(progressOf(meta({ done: -1, total: 10 })), null);
  assert.equal(progressOf(meta("3/10")), null);
  assert.equal(progressOf({}), null);
  assert.equal(progressOf(null), null);
});
