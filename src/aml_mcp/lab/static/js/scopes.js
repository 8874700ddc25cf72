// What a token's scopes amount to, with the server's hierarchy applied (`scopeImplies` in
// /lab/config.json: each scope and every scope it implies), so the page can tell before asking
// whether a request would be refused — and not send it.

export function grantedScopes(claims) {
  return String(claims?.scope || "").split(" ").filter(Boolean);
}

export function effectiveScopes(granted, implies = {}) {
  const effective = new Set();
  for (const scope of granted) {
    effective.add(scope);
    for (const implied of implies[scope] || []) effective.add(implied);
  }
  return effective;
}

/** Whether the scopes (already effective) cover `needed` (a scope, or nothing needed). */
export function covers(effective, needed) {
  return !needed || effective.has(needed);
}
