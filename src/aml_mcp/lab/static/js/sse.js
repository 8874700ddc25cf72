// Server-sent events as the MCP Streamable HTTP transport sends them: each event's `data:` lines
// hold one JSON-RPC message. The parser is fed text in whatever chunks the network delivers (a line,
// an event, even a CRLF, may be split across chunks) and hands back each message it completes.

export class SseParser {
  constructor() {
    this.buffer = "";
  }

  /** Feeds `text`; returns the JSON-RPC messages of the events it completed (in order). */
  push(text) {
    // CRLF and lone CR end lines as LF does; a CR at the very end may be the first half of a CRLF.
    this.buffer = (this.buffer + text).replace(/\r\n|\r(?!$)/g, "\n");
    const messages = [];
    let end;
    while ((end = this.buffer.indexOf("\n\n")) >= 0) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const message = parseEvent(block);
      if (message !== undefined) messages.push(message);
    }
    return messages;
  }

  /** At the end of the stream: the last event, if it was not followed by a blank line. */
  finish() {
    const block = this.buffer.replace(/\r$/, "").replace(/\n+$/, "");
    this.buffer = "";
    const message = block ? parseEvent(block) : undefined;
    return message === undefined ? [] : [message];
  }
}

/** The JSON in an event's `data:` lines (joined by newlines), or `undefined` for none or not JSON. */
function parseEvent(block) {
  const data = [];
  for (const line of block.split("\n")) {
    if (line === "data") data.push("");
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    // `event:`, `id:`, `retry:` and `:` comments carry nothing the page needs.
  }
  if (!data.length) return undefined;
  try {
    return JSON.parse(data.join("\n"));
  } catch {
    return undefined;
  }
}

/** Yields each JSON-RPC message of an SSE response body as it arrives. */
export async function* events(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      yield* parser.push(decoder.decode(value, { stream: true }));
    }
    yield* parser.push(decoder.decode());
    yield* parser.finish();
  } finally {
    reader.releaseLock();
  }
}
