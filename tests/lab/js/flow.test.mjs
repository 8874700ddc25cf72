// Which step of the authorization flow refused a simulated request, from its audit records.
import assert from "node:assert/strict";
import { test } from "node:test";

import { STEPS, outcomes, refusedStep } from "../../../src/aml_mcp/lab/static/js/flow.js";

const deny = (reason) => ({ seq: 1, decision: "deny", reason, method: "tools/call" });
const allow = (seq) => ({ seq, decision: "allow", reason: "ok", method: "tasks/get" });

test("each reason lights the check the design makes for it", () => {
  assert.equal(refusedStep("no_token"), "discovery");
  assert.equal(refusedStep("wrong_audience"), "audience");
  assert.equal(refusedStep("expired"), "validity");
  assert.equal(refusedStep("revoked_subject"), "validity");
  assert.equal(refusedStep("insufficient_scope"), "scope");
  assert.equal(refusedStep("wrong_issuer"), "issuer");
  assert.equal(refusedStep("unknown_key"), "issuer");
  assert.equal(refusedStep("not_found"), "handler");
  assert.equal(refusedStep("something_new"), null);
});

test("a token for another server: the flaw at the token, refused at the audience check", () => {
  const { steps, refused } = outcomes("wrong_audience", [deny("wrong_audience")], 401);
  assert.equal(refused, "audience");
  assert.equal(steps.token.outcome, "flawed");
  assert.equal(steps.issuer.outcome, "passed");
  assert.equal(steps.audience.outcome, "refused");
  assert.equal(steps.audience.records[0].reason, "wrong_audience");
  assert.deepEqual(["validity", "scope", "handler"].map((step) => steps[step].outcome), ["unreached", "unreached", "unreached"]);
});

test("no token: the 401 that points at the metadata is the step lit", () => {
  const { steps, refused } = outcomes("no_token", [deny("no_token")], 401);
  assert.equal(refused, "discovery");
  assert.equal(steps.discovery.outcome, "refused");
  assert.equal(steps.call.outcome, "unreached");
});

test("no scope: the authorization server granted none, the scope check refuses", () => {
  const { steps, refused } = outcomes("no_scope", [deny("insufficient_scope")], 403);
  assert.equal(refused, "scope");
  assert.equal(steps.authorization.outcome, "flawed");
});

test("another bank: the gate lets it through, the handler answers Task not found", () => {
  const records = [allow(1), { ...deny("not_found"), seq: 2, method: "tasks/get" }];
  const { steps, refused } = outcomes("other_bank", records, 400);
  assert.equal(refused, "handler");
  assert.equal(steps.scope.outcome, "passed");
  assert.deepEqual(steps.scope.records.map((r) => r.seq), [1]);
  assert.deepEqual(steps.handler.records.map((r) => r.seq), [2]);
});

test("every step has an outcome; an admitted request reaches the handler", () => {
  const { steps, refused } = outcomes("valid", [allow(1)], 200);
  assert.equal(refused, null);
  assert.deepEqual(Object.keys(steps), STEPS.map((s) => s.step));
  assert.equal(steps.handler.outcome, "answered");
});
