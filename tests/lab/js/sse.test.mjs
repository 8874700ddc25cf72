// The SSE parser the page reads MCP streams with: events split anywhere across network chunks.
import assert from "node:assert/strict";
import { test } from "node:test";

import { SseParser } from "../../../src/aml_mcp/lab/static/js/sse.js";

const message = (id) => ({ jsonrpc: "2.0", method: "notifications/tasks", params: { taskId: `t${id}` } });
const event = (value, eol = "\n") => `event: message${eol}data: ${JSON.stringify(value)}${eol}${eol}`;

test("one event per message, in order", () => {
  const parser = new SseParser();
  assert.deepEqual(parser.push(event(message(1)) + event(message(2))), [message(1), message(2)]);
});

test("an event split at every byte arrives whole, once", () => {
  const text = event(message(1)) + event(message(2));
  const parser = new SseParser();
  const seen = [];
  for (const char of text) seen.push(...parser.push(char));
  assert.deepEqual(seen, [message(1), message(2)]);
});

test("CRLF and CR line ends, a CRLF split between chunks", () => {
  const crlf = event(message(1), "\r\n");
  const parser = new SseParser();
  const cut = crlf.indexOf("\r\n") + 1; // between \r and \n
  assert.deepEqual([...parser.push(crlf.slice(0, cut)), ...parser.push(crlf.slice(cut))], [message(1)]);
  // A CR at the end of a chunk may be half a CRLF: the event is complete with the next chunk, or at the end.
  const cr = new SseParser();
  assert.deepEqual([...cr.push(event(message(2), "\r")), ...cr.finish()], [message(2)]);
  assert.deepEqual(new SseParser().push(event(message(3), "\r") + "x"), [message(3)]);
});

test("data lines join with newlines; comments, ids and retry are ignored", () => {
  const parser = new SseParser();
  const text = ': keep-alive\n\nid: 7\nretry: 1000\ndata: {"a":\ndata: 1}\n\n';
  assert.deepEqual(parser.push(text), [{ a: 1 }]);
});

test("an event that is not JSON is skipped, the next one still arrives", () => {
  const parser = new SseParser();
  assert.deepEqual(parser.push("data: {not json\n\n" + event(message(3))), [message(3)]);
});

test("the last event without a blank line is delivered at the end of the stream", () => {
  const parser = new SseParser();
  assert.deepEqual(parser.push(`data: ${JSON.stringify(message(4))}\n`), []);
  assert.deepEqual(parser.finish(), [message(4)]);
  assert.deepEqual(parser.finish(), []);
});
