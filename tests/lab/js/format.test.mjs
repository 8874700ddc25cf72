// Times on the page: one zone (UTC) everywhere, and durations people read at a glance.
import assert from "node:assert/strict";
import { test } from "node:test";

import { clock, duration, isoTime, preciseClock, time } from "../../../src/aml_mcp/lab/static/js/dom.js";
import { covers, effectiveScopes } from "../../../src/aml_mcp/lab/static/js/scopes.js";

const MS = Date.parse("2026-07-28T14:03:27.412Z");

test("every time is UTC and says so", () => {
  assert.equal(clock(MS), "14:03:27 UTC");
  assert.equal(time(MS), "2026-07-28 14:03:27 UTC");
  assert.equal(preciseClock(MS), "14:03:27.412");
  assert.equal(isoTime("2026-07-28T14:03:27.412Z"), "2026-07-28 14:03:27 UTC");
  assert.equal(isoTime("not a time"), "not a time");
});

test("durations", () => {
  assert.equal(duration(37), "37 ms");
  assert.equal(duration(4210), "4.2 s");
  assert.equal(duration(42_000), "42 s");
  assert.equal(duration(192_000), "3 min 12 s");
  assert.equal(duration(3_840_000), "1 h 04 min");
  assert.equal(duration(null), "");
});

test("the scope hierarchy: aml:admin implies the others, nothing implies aml:admin", () => {
  const implies = { "aml:admin": ["aml:admin", "aml:draft", "aml:eval", "aml:read"] };
  const carol = effectiveScopes(["aml:admin"], implies);
  assert.equal(covers(carol, "aml:eval"), true);
  const alice = effectiveScopes(["aml:read", "aml:draft"], implies);
  assert.equal(covers(alice, "aml:eval"), false);
  assert.equal(covers(alice, "aml:admin"), false);
  assert.equal(covers(alice, undefined), true);
});
