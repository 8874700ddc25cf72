// The audit view's folding of consecutive records of one decision, and its filter by task.
import assert from "node:assert/strict";
import { test } from "node:test";

import { AuditFolds, aboutTask } from "../../../src/aml_mcp/lab/static/js/audit-fold.js";

let seq = 0;
function record(fields = {}) {
  seq += 1;
  return { seq, time: `2026-07-28T10:00:${String(seq % 60).padStart(2, "0")}.000Z`, method: "tasks/get", target: "AbCdEfGh",
    decision: "allow", reason: "ok", subject: "carol", client_id: "aml-mcp-lab", tenant: "meridian-bank", ...fields };
}

test("consecutive polls of one task fold into one row with a count and their span", () => {
  const polls = Array.from({ length: 12 }, () => record());
  const { groups } = AuditFolds.of(polls);
  assert.equal(groups.length, 1);
  assert.equal(groups[0].count, 12);
  assert.equal(groups[0].first, polls[0]);
  assert.equal(groups[0].last, polls[11]);
});

test("a different method, target, decision, reason, subject or client starts a new row", () => {
  const base = record();
  const others = [{ method: "tasks/cancel" }, { target: "ZzZzZzZz" }, { decision: "deny" }, { reason: "not_found" },
    { subject: "alice" }, { client_id: "aml-mcp-cli" }];
  for (const change of others) {
    assert.equal(AuditFolds.of([base, record(change)]).groups.length, 2, JSON.stringify(change));
  }
  // What a record says beyond the decision (its detail, its time) does not split a fold.
  assert.equal(AuditFolds.of([base, record({ detail: { tool: "run_full_eval" } })]).groups.length, 1);
});

test("only consecutive records fold: a record between them keeps the order true", () => {
  const { groups } = AuditFolds.of([record(), record(), record({ method: "tools/call", target: "search_aml_notes" }), record()]);
  assert.deepEqual(groups.map((group) => group.count), [2, 1, 1]);
});

test("adding a record says whether it opened a row or counted in the last one", () => {
  const folds = new AuditFolds();
  assert.equal(folds.add(record()).created, true);
  assert.equal(folds.add(record()).created, false);
  assert.equal(folds.add(record({ decision: "deny" })).created, true);
});

test("the task filter matches the 8-character reference the trail keeps", () => {
  const poll = record({ target: "AbCdEfGh" });
  const created = record({ method: "tools/call", reason: "task_created", target: "AbCdEfGh" });
  const search = record({ method: "tools/call", target: "search_aml_notes" });
  assert.equal(aboutTask(poll, "AbCdEfGhIjKlMnOp"), true);
  assert.equal(aboutTask(created, "AbCdEfGhIjKlMnOp"), true);
  assert.equal(aboutTask(poll, "AbCd"), true);
  assert.equal(aboutTask(poll, "ZzZzZzZzIjKl"), false);
  assert.equal(aboutTask(search, "sear"), false);
  assert.equal(aboutTask(record({ target: null }), "AbCd"), false);
  assert.equal(aboutTask(search, "  "), true);
});
