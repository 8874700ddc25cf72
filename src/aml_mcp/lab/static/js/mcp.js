// A small MCP 2026-07-28 client over Streamable HTTP: every request is a self-contained POST with
// the protocol version and this page's capabilities in `_meta` and the routing headers the server
// checks (`Mcp-Method`, `Mcp-Name`). Answers come as JSON or as a server-sent-events stream.

import { events } from "./sse.js";

export const PROTOCOL = "2026-07-28";
export const TASKS = "io.modelcontextprotocol/tasks";

let nextId = 1;

export class McpError extends Error {
  constructor(error, status) {
    super(error?.message || `HTTP ${status}`);
    this.error = error;
    this.status = status;
  }
}

function nameOf(method, params) {
  if (method === "tools/call" || method === "prompts/get") return params.name;
  if (method === "resources/read") return params.uri;
  if (method.startsWith("tasks/")) return params.taskId;
  return undefined;
}

function meta() {
  return {
    "io.modelcontextprotocol/protocolVersion": PROTOCOL,
    "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS]: {} }, elicitation: {} },
    "io.modelcontextprotocol/clientInfo": { name: "aml-mcp-lab", version: "1.0.0" },
  };
}

export class McpClient {
  constructor(url, token) {
    this.url = url;
    this.token = token;
  }

  /** One request, answered in full: `{status, challenge, message}` whatever the outcome (for the simulation). */
  async exchange(method, params = {}, { token = this.token, signal } = {}) {
    const id = nextId++;
    const headers = {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": PROTOCOL,
      "mcp-method": method,
    };
    const name = nameOf(method, params);
    if (name !== undefined) headers["mcp-name"] = name;
    if (token) headers.authorization = `Bearer ${token}`;
    const response = await fetch(this.url, {
      method: "POST",
      headers,
      body: JSON.stringify({ jsonrpc: "2.0", id, method, params: { ...params, _meta: meta() } }),
      signal,
    });
    const challenge = response.headers.get("www-authenticate");
    let message = null;
    const type = response.headers.get("content-type") || "";
    if (type.startsWith("text/event-stream")) {
      for await (const item of events(response.body)) {
        if (item.id === id) message = item;
      }
    } else if (type.includes("json")) {
      message = await response.json();
    }
    return { status: response.status, challenge, message };
  }

  /** The result of a request, or an `McpError` with the JSON-RPC error (and HTTP status). */
  async request(method, params = {}, options = {}) {
    const { status, challenge, message } = await this.exchange(method, params, options);
    if (message?.result !== undefined) return message.result;
    const error = new McpError(message?.error, status);
    error.challenge = challenge;
    throw error;
  }

  /**
   * Opens `subscriptions/listen` with `filter` and calls `onMessage` for every notification until
   * the stream ends; resolves with the graceful close result (its reason in `_meta`), if any.
   */
  async listen(filter, onMessage, signal) {
    const id = `lab-${nextId++}`;
    const response = await fetch(this.url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL,
        "mcp-method": "subscriptions/listen",
        authorization: `Bearer ${this.token}`,
      },
      body: JSON.stringify({ jsonrpc: "2.0", id, method: "subscriptions/listen",
        params: { notifications: filter, _meta: meta() } }),
      signal,
    });
    const type = response.headers.get("content-type") || "";
    if (!response.ok || !type.startsWith("text/event-stream")) {
      const body = type.includes("json") ? await response.json() : null;
      throw new McpError(body?.error, response.status);
    }
    for await (const message of events(response.body)) {
      if (message.method) onMessage(message);
      else if (message.id === id) return message.result ?? null;
    }
    return null;
  }
}
