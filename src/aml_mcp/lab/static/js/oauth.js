// Sign-in as a public OAuth client: discovery (RFC 9728, RFC 8414), authorization code with PKCE,
// the RFC 8707 `resource` on both requests, and the RFC 9207 `iss` of the response checked.
// The access token lives in this tab's sessionStorage only; nothing is sent anywhere but the server.

const KEY = "aml-mcp-lab/session";
const PENDING = "aml-mcp-lab/pending";

function base64url(bytes) {
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomString(size = 32) {
  return base64url(crypto.getRandomValues(new Uint8Array(size)));
}

async function challengeOf(verifier) {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return base64url(new Uint8Array(digest));
}

async function getJson(url) {
  const response = await fetch(url, { headers: { accept: "application/json" } });
  if (!response.ok) throw new Error(`${url} answered ${response.status}`);
  return response.json();
}

function wellKnown(base, suffix) {
  const url = new URL(base);
  const path = url.pathname.replace(/\/$/, "");
  return `${url.origin}/.well-known/${suffix}${path}`;
}

/** The protected resource's metadata, then its first authorization server's. */
export async function discover(resource) {
  const protectedResource = await getJson(wellKnown(resource, "oauth-protected-resource"));
  const issuer = protectedResource.authorization_servers?.[0];
  if (!issuer) throw new Error("the resource names no authorization server");
  let server;
  try {
    server = await getJson(wellKnown(issuer, "oauth-authorization-server"));
  } catch {
    server = await getJson(wellKnown(issuer, "openid-configuration"));
  }
  if (server.issuer !== issuer) throw new Error("the authorization server's metadata names another issuer");
  return { protectedResource, server };
}

export function redirectUri() {
  return `${location.origin}/lab/`;
}

/**
 * Leaves the page for the authorization server; `finishSignIn` picks up on the way back. `stepUp`
 * names the scope a step-up asks for, so the page can say whether it was granted.
 */
export async function startSignIn(config, scopes, { stepUp = null } = {}) {
  const { server } = await discover(config.resource);
  const verifier = randomString(48);
  const state = randomString(16);
  sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state, issuer: server.issuer,
    tokenEndpoint: server.token_endpoint, scopes, stepUp }));
  const url = new URL(server.authorization_endpoint);
  url.search = new URLSearchParams({
    response_type: "code",
    client_id: config.clientId,
    redirect_uri: redirectUri(),
    scope: scopes.join(" "),
    state,
    code_challenge: await challengeOf(verifier),
    code_challenge_method: "S256",
    resource: config.resource,
  }).toString();
  location.assign(url.toString());
}

/** On the redirect back: checks state and `iss`, exchanges the code. Returns the session or null. */
export async function finishSignIn(config) {
  const query = new URLSearchParams(location.search);
  if (!query.has("code") && !query.has("error")) return null;
  history.replaceState(null, "", redirectUri());
  const pending = JSON.parse(sessionStorage.getItem(PENDING) || "null");
  sessionStorage.removeItem(PENDING);
  if (!pending || query.get("state") !== pending.state) throw new Error("sign-in answer does not match a sign-in this page started");
  if (query.get("iss") !== pending.issuer) throw new Error("sign-in answer comes from another issuer (RFC 9207)");
  if (query.has("error")) throw new Error(`sign-in refused: ${query.get("error_description") || query.get("error")}`);
  const response = await fetch(pending.tokenEndpoint, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code: query.get("code"),
      redirect_uri: redirectUri(),
      client_id: config.clientId,
      code_verifier: pending.verifier,
      resource: config.resource,
    }),
  });
  const body = await response.json();
  if (!response.ok) throw new Error(`token request refused: ${body.error_description || body.error}`);
  // What was asked for is kept: a scope asked for and not granted was withheld by the authorization
  // server (the user does not hold it), and asking again would only repeat the same sign-in.
  const session = { accessToken: body.access_token, scope: body.scope || "", expiresIn: body.expires_in,
    receivedAt: Date.now(), issuer: pending.issuer, asked: pending.scopes || [], stepUp: pending.stepUp || null,
    fresh: true };
  sessionStorage.setItem(KEY, JSON.stringify(session));
  return session;
}

export function storedSession() {
  const session = JSON.parse(sessionStorage.getItem(KEY) || "null");
  if (!session) return null;
  session.fresh = false;
  const claims = claimsOf(session.accessToken);
  if (claims?.exp && claims.exp * 1000 <= Date.now()) {
    sessionStorage.removeItem(KEY);
    return null;
  }
  return session;
}

export function signOut() {
  sessionStorage.removeItem(KEY);
}

/** The token's claims, for display only: the server verifies the token, the page only reads it. */
export function claimsOf(token) {
  try {
    const payload = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(decodeURIComponent(escape(atob(payload))));
  } catch {
    return null;
  }
}
