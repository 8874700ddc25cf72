// The authorization flow of the design, step by step, and which step refused a simulated request:
// the client's side (a call without a token answered 401 with the resource's metadata, the
// authorization server, a token bound to this server's audience), then the call and the server's
// checks in the order the gate makes them (issuer and signature, audience, the token's validity,
// scope), then the handler, which answers from the caller's bank only. No DOM here.

export const STEPS = [
  { step: "discovery", part: "client", title: "401 → protected resource metadata",
    detail: "A call without a token is answered 401; the challenge points at the resource's metadata (RFC 9728), which names its authorization server." },
  { step: "authorization", part: "client", title: "Authorization server",
    detail: "Sign-in and consent (code flow with PKCE): it grants the scopes the user holds." },
  { step: "token", part: "client", title: "Token bound to an audience",
    detail: "The RFC 8707 resource: the token is valid for this server and no other." },
  { step: "call", part: "client", title: "Call /mcp with the token",
    detail: "The bearer token in the Authorization header." },
  { step: "issuer", part: "server", title: "Issuer check",
    detail: "Signed with the key of an issuer this server trusts." },
  { step: "audience", part: "server", title: "Audience check",
    detail: "The token's audience names this server." },
  { step: "validity", part: "server", title: "Token validity",
    detail: "Not expired, not before its time, not revoked." },
  { step: "scope", part: "server", title: "Scope check",
    detail: "The token grants the scope the method needs (the hierarchy applied)." },
  { step: "handler", part: "server", title: "Handler",
    detail: "Answers from the caller's bank only: another bank's task is not found." },
];

/** The step whose check an audit reason names. */
const REFUSED_AT = {
  no_token: "discovery",
  token_in_query: "call", duplicate_authorization: "call", not_bearer: "call",
  wrong_issuer: "issuer", unknown_key: "issuer", bad_signature: "issuer", disallowed_algorithm: "issuer",
  malformed_token: "issuer", wrong_token_type: "issuer", missing_claim: "issuer", unsafe_identity: "issuer",
  wrong_audience: "audience",
  expired: "validity", not_yet_valid: "validity", inactive_token: "validity",
  insufficient_scope: "scope", simulated_token: "scope",
  not_found: "handler",
};

export function refusedStep(reason) {
  if (typeof reason !== "string") return null;
  if (reason.startsWith("revoked")) return "validity";
  return REFUSED_AT[reason] ?? (reason.startsWith("missing_") ? "issuer" : null);
}

/** Where each case's credential is wrong before it is sent (the step the flaw was made at). */
const FLAWED_AT = { wrong_audience: "token", expired: "token", no_scope: "authorization", other_bank: "token" };

/**
 * Each step's outcome for one simulated request: `{step → {outcome, records}}` with outcome one of
 * "passed", "flawed", "refused", "answered" or "unreached", and the refused step (or null).
 * `records` are the request's audit records: the refusal beside the step that refused; an admitted
 * request's gate record beside the scope check (the last check of the gate).
 */
export function outcomes(kind, records = [], status = null) {
  const refusal = records.find((record) => record.decision === "deny");
  const admitted = records.filter((record) => record.decision === "allow");
  const refused = refusal ? (refusedStep(refusal.reason) ?? "call") : (status >= 400 ? "call" : null);
  const index = refused ? STEPS.findIndex((s) => s.step === refused) : STEPS.length;
  const result = {};
  STEPS.forEach((s, position) => {
    let outcome;
    if (position < index) outcome = FLAWED_AT[kind] === s.step ? "flawed" : "passed";
    else if (position === index) outcome = "refused";
    else outcome = "unreached";
    if (s.step === "handler" && !refused) outcome = "answered";
    result[s.step] = { outcome, records: [] };
  });
  if (refusal) result[refused].records.push(refusal);
  const gate = admitted.at(0);
  if (gate && result.scope.outcome !== "unreached") result.scope.records.push(gate);
  for (const other of admitted.slice(1)) result.handler.records.push(other);
  return { steps: result, refused };
}
