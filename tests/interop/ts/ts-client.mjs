#!/usr/bin/env node
// Drives the official TypeScript SDK v2 client (+ ext-tasks) against a running aml-mcp serve:
// OAuth login (dynamic registration or the pre-registered aml-mcp-cli client, the browser step
// done by login.mjs, or with --idp oidc-provider by ../oidc/sign-in.mjs at that authorization
// server), tools/list, search_aml_notes, run_full_eval to completion through
// ext-tasks, draft_sar_batch through input_required → answer → completed, and a
// subscriptions/listen stream following a task. Prints one JSON line per step on stdout
// ({"step": ..., ...}); exits non-zero on the first failure.
//
//   node ts-client.mjs --url http://127.0.0.1:PORT/mcp --login dcr|preregistered [--user carol]
//                      [--idp dev|oidc-provider]
import http from "node:http";
import { parseArgs } from "node:util";

import { createApplicationInputHandler, createTaskSessionFromClient } from "@modelcontextprotocol/ext-tasks/client";

import { connect, TASKS } from "./connect.mjs";
import { signIn } from "../oidc/sign-in.mjs";
import { approve } from "./login.mjs";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    login: { type: "string", default: "dcr" },
    user: { type: "string", default: "carol" },
    idp: { type: "string", default: "dev" },
    "draft-cases": { type: "string", default: "MRD-C000001,HBT-C000001" },
  },
});
const PROTOCOL = "2026-07-28";
const report = (step, fields = {}) => process.stdout.write(`${JSON.stringify({ step, ...fields })}\n`);

/** A loopback listener for the OAuth redirect: resolves with the callback's query parameters. */
async function callbackListener() {
  let deliver;
  const received = new Promise((resolve) => (deliver = resolve));
  const server = http.createServer((req, res) => {
    const params = new URL(req.url, "http://127.0.0.1").searchParams;
    res.end("You may close this window.");
    if (params.has("code") || params.has("error")) deliver(params);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}/oauth/callback`;
  return { url, received, close: () => server.close() };
}

/** An in-memory OAuthClientProvider whose "browser" is login.mjs. */
function authProvider({ redirectUrl, received, preregistered, user }) {
  let client = preregistered ? { client_id: "aml-mcp-cli" } : undefined;
  let tokens;
  let verifier;
  let discovery;
  const log = { registered: undefined, authorizationUrl: undefined };
  return {
    log,
    get redirectUrl() {
      return redirectUrl;
    },
    get clientMetadata() {
      return {
        client_name: "aml-mcp interop (TypeScript SDK)",
        redirect_uris: [redirectUrl],
        grant_types: ["authorization_code", "refresh_token"],
        response_types: ["code"],
        token_endpoint_auth_method: "none",
      };
    },
    clientInformation: () => client,
    saveClientInformation: (info) => {
      client = info;
      if (info.client_id_issued_at !== undefined) log.registered = info; // a dynamic registration
    },
    tokens: () => tokens,
    saveTokens: (saved) => {
      tokens = saved;
    },
    saveCodeVerifier: (v) => {
      verifier = v;
    },
    codeVerifier: () => verifier,
    redirectToAuthorization: async (authorizationUrl) => {
      log.authorizationUrl = authorizationUrl.href;
      const browse = args.idp === "oidc-provider" ? signIn : approve;
      const location = await browse(authorizationUrl.href, user);
      await (await fetch(location)).arrayBuffer(); // the browser lands on our callback
    },
    callbackParams: async () => {
      const params = await received;
      if (params.get("error")) throw new Error(`authorization failed: ${params.get("error")}`);
      return params;
    },
    saveDiscoveryState: (state) => {
      discovery = state;
    },
    discoveryState: () => discovery,
    accessToken: () => tokens?.access_token,
  };
}

/** A plain 2026-07-28 POST of one JSON-RPC request (ext-tasks' rawDispatch): the SDK's own codecs
 * do not carry Tasks V2 traffic, so the host sends it, with the routing headers the spec asks. */
function rawDispatcher(url, provider) {
  let nextId = 1;
  return async (unframed) => {
    const request = { jsonrpc: "2.0", id: `tasks-${nextId++}`, ...unframed };
    const params = request.params ?? {};
    const name = request.method === "tools/call" ? params.name : params.taskId;
    const headers = {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${provider.accessToken()}`,
      "mcp-protocol-version": PROTOCOL,
      "mcp-method": request.method,
      ...(name === undefined ? {} : { "mcp-name": String(name) }),
    };
    const answer = await fetch(url, { method: "POST", headers, body: JSON.stringify(request) });
    const text = await answer.text();
    if (process.env.AML_MCP_INTEROP_DEBUG) process.stderr.write(`> ${JSON.stringify(request)}\n< ${text}\n`);
    if ((answer.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
      const messages = text
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => JSON.parse(line.slice(5)));
      return messages.find((m) => m.id === request.id && ("result" in m || "error" in m));
    }
    return JSON.parse(text);
  };
}

/** subscriptions/listen following tasks: every notifications/tasks until each is terminal. */
async function followTasks(url, provider, taskIds, { onAcknowledged }) {
  const body = {
    jsonrpc: "2.0",
    id: "follow-1",
    method: "subscriptions/listen",
    params: {
      notifications: { taskIds },
      _meta: {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS]: {} } },
      },
    },
  };
  const answer = await fetch(url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${provider.accessToken()}`,
      "mcp-protocol-version": PROTOCOL,
      "mcp-method": "subscriptions/listen",
    },
    body: JSON.stringify(body),
  });
  if (answer.status !== 200) throw new Error(`listen refused: HTTP ${answer.status} ${await answer.text()}`);
  const seen = [];
  const open = new Set(taskIds);
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of answer.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let cut;
    while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
      const data = event
        .split(/\r?\n/)
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5))
        .join("\n");
      if (!data) continue;
      const message = JSON.parse(data);
      if (message.method === "notifications/subscriptions/acknowledged") await onAcknowledged(message.params);
      if (message.method === "notifications/tasks") {
        seen.push({ taskId: message.params.taskId, status: message.params.status });
        if (["completed", "failed", "cancelled"].includes(message.params.status)) open.delete(message.params.taskId);
        if (open.size === 0) return seen; // leaving the loop cancels the stream
      }
    }
  }
  return seen;
}

async function main() {
  const callback = await callbackListener();
  const provider = authProvider({
    redirectUrl: callback.url,
    received: callback.received,
    preregistered: args.login === "preregistered",
    user: args.user,
  });
  try {
    const client = await connect(args.url, provider);
    report("login", {
      era: client.getProtocolEra?.(),
      protocolVersion: client.getNegotiatedProtocolVersion?.() ?? null,
      clientId: provider.clientInformation()?.client_id,
      registered: provider.log.registered ?? null,
      redirectUri: callback.url,
      authorizationUrl: provider.log.authorizationUrl ?? null,
    });

    const { tools } = await client.listTools();
    report("tools/list", { tools: tools.map((t) => t.name).sort() });

    const search = await client.callTool({
      name: "search_aml_notes",
      arguments: { query: "cash deposits kept under the reporting threshold", top_k: 3 },
    });
    report("search_aml_notes", { isError: search.isError ?? false, text: search.content?.[0]?.text ?? "" });

    const answered = [];
    const clientInfo = { name: "aml-assistant", version: "1.0.0" }; // as connect.mjs declares
    const session = createTaskSessionFromClient(client, {
      endpointId: `aml-mcp-interop-${args.login}`,
      rawDispatch: rawDispatcher(args.url, provider),
      v2RequestFraming: {
        protocolVersion: PROTOCOL,
        clientInfo,
        clientCapabilities: { elicitation: {}, extensions: { [TASKS]: {} } },
      },
      onInputRequest: createApplicationInputHandler({
        elicitation: async (request) => {
          answered.push(request.params.message ?? "");
          const properties = request.params.requestedSchema?.properties ?? {};
          const content = {};
          for (const [key, schema] of Object.entries(properties)) {
            content[key] = schema.format === "date" || /date/i.test(key) ? "1958-11-30" : "ACC-0001";
          }
          return { action: "accept", content };
        },
        sampling: async () => {
          throw new Error("no sampling here");
        },
        roots: async () => ({ roots: [] }),
      }),
    });
    try {
      const evalRun = await session.callTool("run_full_eval", {});
      const evalTaskId = evalRun.handle?.taskId;
      const statuses = [];
      const { outcome } = await evalRun.settle({
        onEvent: (event) => {
          if (event.type === "task") statuses.push(event.task.status);
        },
      });
      report("run_full_eval", {
        kind: evalRun.kind,
        taskId: evalTaskId ?? null,
        statuses,
        status: outcome.status,
        structured: outcome.status === "completed" ? outcome.result.structuredContent ?? null : null,
      });

      const caseIds = args["draft-cases"] ? args["draft-cases"].split(",") : [];
      const draft = await session.callTool("draft_sar_batch", { case_ids: caseIds });
      const draftStatuses = [];
      const drafted = await draft.settle({
        onEvent: (event) => {
          if (event.type === "task") draftStatuses.push(event.task.status);
        },
      });
      report("draft_sar_batch", {
        kind: draft.kind,
        taskId: draft.handle?.taskId ?? null,
        statuses: draftStatuses,
        answered,
        status: drafted.outcome.status,
        structured: drafted.outcome.status === "completed" ? drafted.outcome.result.structuredContent ?? null : null,
      });

      // A listen stream following a task the session started and then left to the stream.
      const followed = await session.callTool("run_full_eval", {});
      const taskId = followed.handle?.taskId;
      await followed.detach();
      let acknowledged;
      const seen = await followTasks(args.url, provider, [taskId], {
        onAcknowledged: async (params) => {
          acknowledged = params.notifications;
        },
      });
      report("listen", { taskId, acknowledged, seen });
    } finally {
      await session.close();
    }
    await client.close();
  } finally {
    callback.close();
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    report("error", { message: String(error?.stack ?? error) });
    process.exit(1);
  },
);
