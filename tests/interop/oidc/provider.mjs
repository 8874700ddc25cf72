#!/usr/bin/env node
// Runs the authorization server of configuration.mjs on 127.0.0.1 for the interop tests
// (tests/support/oidc_provider.py starts it): binds the port first (0: any free one), so the issuer
// is http://127.0.0.1:PORT, then prints one JSON line {"issuer": ..., "port": ...} on stdout.
//
//   node provider.mjs --settings FILE
//
// FILE (JSON, written by the test): `clients` (static registrations), `accessTokenTtl` (seconds).
//
// Besides oidc-provider's own endpoints it serves the sign-in page its interactions lead to
// (GET /interaction/UID; POST /interaction/UID/login with `username` and `password` = the user
// name signs in and consents at once, granting the requested scopes the user may have, or only the
// ones ticked as `grant` fields: a person may grant less than asked), and, for
// the tests only, on the same loopback port:
//   POST /test/keys/rotate   a new signing key, first in the JWKS (it signs from now on); the
//                            previous ones stay published
//   POST /test/keys/retire   drop every key but the newest from the JWKS
//   GET  /test/stats         requests per endpoint (introspection counts)
// A key change builds a new Provider on the same port and the same storage (registrations, grants
// and tokens survive), as a restart of the real service would.
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import { parseArgs } from "node:util";

import Provider from "oidc-provider";
import { createMemoryAdapter } from "oidc-provider/lib/adapters/memory_adapter.js";

import { account, allowedScopes, configuration, SCOPES } from "./configuration.mjs";

const { values: args } = parseArgs({ options: { settings: { type: "string" } } });
const settings = JSON.parse(fs.readFileSync(args.settings, "utf8"));
const cookieSecret = crypto.randomBytes(32).toString("base64url");
const keys = [];
const stats = {};
// One store for every Provider this process builds: registrations, grants and tokens outlive a
// key change (in memory: a test's provider keeps nothing once it stops).
const storage = createMemoryAdapter();
let provider;

function newKey() {
  const { privateKey } = crypto.generateKeyPairSync("rsa", { modulusLength: 2048 });
  const jwk = privateKey.export({ format: "jwk" });
  return { ...jwk, kid: `k${keys.length + 1}-${crypto.randomBytes(4).toString("hex")}`, use: "sig", alg: "RS256" };
}

function build(issuer) {
  const config = configuration({ cookieSecret, accessTokenTtl: settings.accessTokenTtl, clients: settings.clients });
  const built = new Provider(issuer, { ...config, adapter: storage, jwks: { keys: [...keys] } });
  built.on("server_error", (ctx, error) => process.stderr.write(`provider server_error: ${error.stack}\n`));
  return built;
}

const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function page(res, status, title, body) {
  res.writeHead(status, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" });
  res.end(`<!doctype html><title>${escape(title)}</title><h1>${escape(title)}</h1>${body}`);
}

async function form(req) {
  let body = "";
  for await (const chunk of req) {
    body += chunk;
    if (body.length > 65536) throw new Error("form too large");
  }
  return new URLSearchParams(body);
}

/** Sign-in and consent in one step: the grant holds what was asked and the user may have. */
async function signIn(req, res, uid) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) return page(res, 400, "Not this sign-in", "");
  const fields = await form(req);
  const username = fields.get("username") ?? "";
  const user = account(username);
  if (!user || fields.get("password") !== username) {
    return page(res, 401, "Sign in", `<p>Unknown user or wrong password.</p>${loginForm(uid)}`);
  }
  const { params } = details;
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: user.sub, clientId: params.client_id });
  const requested = String(params.scope ?? "").split(" ").filter(Boolean);
  // The user may untick scopes on the consent form (`grant` fields); without any, all they may have.
  const ticked = fields.getAll("grant");
  const may = new Set(allowedScopes(username).filter((s) => !ticked.length || ticked.includes(s)));
  const granted = requested.filter((s) => !SCOPES.includes(s) || may.has(s));
  const refused = requested.filter((s) => SCOPES.includes(s) && !may.has(s));
  if (granted.length) grant.addOIDCScope(granted.join(" "));
  if (refused.length) grant.rejectOIDCScope(refused.join(" "));
  const resources = [params.resource ?? []].flat();
  for (const resource of resources) {
    const forResource = granted.filter((s) => SCOPES.includes(s));
    if (forResource.length) grant.addResourceScope(resource, forResource.join(" "));
    if (refused.length) grant.rejectResourceScope(resource, refused.join(" "));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(
    req,
    res,
    { login: { accountId: user.sub }, consent: { grantId } },
    { mergeWithLastSubmission: false },
  );
}

function loginForm(uid) {
  return (
    `<form method="post" action="/interaction/${escape(uid)}/login">` +
    `<label>User <input name="username" autocomplete="username"></label> ` +
    `<label>Password <input name="password" type="password"></label> ` +
    `<button type="submit">Sign in and allow</button></form>`
  );
}

async function interaction(req, res, url) {
  const match = url.pathname.match(/^\/interaction\/([\w-]+)(\/login)?$/);
  if (!match) return false;
  const [, uid, login] = match;
  if (login && req.method === "POST") {
    await signIn(req, res, uid);
  } else if (!login && req.method === "GET") {
    const details = await provider.interactionDetails(req, res);
    const wanted = `${details.params.client_id} asks for: ${details.params.scope ?? "(no scope)"}`;
    page(res, 200, "Sign in", `<p>${escape(wanted)}</p>${loginForm(uid)}`);
  } else {
    page(res, 405, "Method not allowed", "");
  }
  return true;
}

async function testRoute(req, res, url, issuer) {
  if (!url.pathname.startsWith("/test/")) return false;
  const answer = (body) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  };
  if (req.method === "POST" && url.pathname === "/test/keys/rotate") {
    keys.unshift(newKey());
    provider = build(issuer);
    answer({ kids: keys.map((k) => k.kid) });
  } else if (req.method === "POST" && url.pathname === "/test/keys/retire") {
    keys.splice(1);
    provider = build(issuer);
    answer({ kids: keys.map((k) => k.kid) });
  } else if (req.method === "GET" && url.pathname === "/test/stats") {
    answer(stats);
  } else {
    page(res, 404, "Not found", "");
  }
  return true;
}

const server = http.createServer();
server.listen(settings.port ?? 0, "127.0.0.1", () => {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  keys.push(newKey());
  provider = build(issuer);
  server.on("request", async (req, res) => {
    const url = new URL(req.url, issuer);
    const route = `${req.method} ${url.pathname.replace(/\/interaction\/[\w-]+/, "/interaction/:uid")}`;
    stats[route] = (stats[route] ?? 0) + 1;
    try {
      if ((await testRoute(req, res, url, issuer)) || (await interaction(req, res, url))) return;
      provider.callback()(req, res);
    } catch (error) {
      process.stderr.write(`provider.mjs: ${error.stack ?? error}\n`);
      if (!res.headersSent) page(res, 400, "Sign-in failed", `<p>${escape(error.message)}</p>`);
    }
  });
  process.stdout.write(`${JSON.stringify({ issuer, port })}\n`);
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
