// The configuration of the third-party authorization server the interop tests run: oidc-provider,
// set up the way a bank's identity provider would be for aml-mcp. It is the one documented in
// docs/identity-providers.md ("The tested configuration"), and aml-mcp trusts it by settings only.
//
//   - authorization code with PKCE (S256, required for every client), refresh tokens (rotated),
//     client credentials, dynamic client registration (RFC 7591, open), introspection (RFC 7662)
//     and revocation (RFC 7009);
//   - RFC 8707 resource indicators: an access token is for exactly one resource, its `aud`; every
//     resource gets RS256-signed JWT access tokens (RFC 9068, `typ: at+jwt`) unless its client
//     asks for opaque ones (`access_token_format`), which a resource server must introspect;
//   - the bank in a nested custom claim, `org.bank` (as Keycloak's nested claim mappers write it),
//     and a readable `preferred_username` beside an opaque `sub` (as most providers do);
//   - RFC 9207 `iss` in every authorization response.
//
// `configuration(options)` returns the object for `new Provider(issuer, configuration)`; the
// runner (provider.mjs) adds the keys and serves the login page that `interactions.url` names.

/** The provider's users. `sub` is an opaque id; the bank is where aml-mcp reads its tenant. */
export const USERS = {
  alice: { sub: "u-5c1d9e", bank: "meridian-bank", scopes: ["aml:read", "aml:draft"] },
  carol: { sub: "u-8a2f41", bank: "meridian-bank", scopes: ["aml:read", "aml:eval", "aml:draft"] },
  // Some providers write every attribute as a list; a list of one bank is that bank.
  bob: { sub: "u-3e77b0", bank: ["harbour-trust"], scopes: ["aml:read"] },
  // A misconfigured directory entry: two banks. aml-mcp must refuse it, never pick one.
  mallory: { sub: "u-000bad", bank: ["meridian-bank", "harbour-trust"], scopes: ["aml:read"] },
};

export const SCOPES = ["aml:read", "aml:eval", "aml:draft", "aml:admin"];

const account = (username) => {
  const user = USERS[username];
  return user && { username, ...user };
};
const bySub = (sub) => Object.keys(USERS).find((name) => USERS[name].sub === sub);

/**
 * @param {object} options
 * @param {string} options.cookieSecret       signs the provider's cookies
 * @param {number} options.accessTokenTtl     seconds an access token lives (default 600)
 * @param {object[]} options.clients          statically registered clients (see provider.mjs)
 */
export function configuration({ cookieSecret, accessTokenTtl = 600, clients = [] }) {
  return {
    clients,
    cookies: { keys: [cookieSecret] },
    scopes: ["openid", "offline_access", ...SCOPES],
    claims: { openid: ["sub"] },
    pkce: { required: () => true },
    // Client metadata of ours: the bank a service client acts for, its token lifetime and format.
    extraClientMetadata: { properties: ["tenant", "access_token_ttl", "access_token_format", "scope_claim"] },
    features: {
      devInteractions: { enabled: false },
      registration: { enabled: true },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: (ctx, client, oneOf) => (oneOf ? oneOf : undefined),
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, resource, client) => ({
          scope: SCOPES.join(" "),
          audience: resource,
          accessTokenTTL: client.access_token_ttl ?? accessTokenTtl,
          accessTokenFormat: client.access_token_format ?? "jwt",
          jwt: { sign: { alg: "RS256" } },
        }),
      },
    },
    // A refresh token for every client allowed the grant, not only with `offline_access`: MCP
    // clients do not ask for that scope.
    issueRefreshToken: async (ctx, client) => client.grantTypeAllowed("refresh_token"),
    rotateRefreshToken: true,
    findAccount: async (ctx, sub) => {
      const username = bySub(sub);
      if (!username) return undefined;
      return { accountId: sub, claims: async () => ({ sub, preferred_username: username }) };
    },
    // The bank and a readable name in every access token (and introspection answer).
    extraTokenClaims: async (ctx, token) => {
      if (token.accountId) {
        const user = account(bySub(token.accountId));
        return user && { org: { bank: user.bank }, preferred_username: user.username };
      }
      const client = token.client ?? (await ctx.oidc.provider.Client.find(token.clientId));
      if (client?.tenant) return { org: { bank: client.tenant }, preferred_username: client.clientId };
      return undefined;
    },
    formats: {
      customizers: {
        // An Okta-style client: its scopes as an `scp` list, and no `scope` claim at all.
        jwt: async (ctx, token, jwt) => {
          const client = token.client ?? (await ctx.oidc.provider.Client.find(token.clientId));
          if (client?.scope_claim === "scp" && typeof jwt.payload.scope === "string") {
            jwt.payload.scp = jwt.payload.scope.split(" ");
            delete jwt.payload.scope;
          }
        },
      },
    },
    ttl: {
      AccessToken: (ctx, token, client) => client?.access_token_ttl ?? token.resourceServer?.accessTokenTTL ?? accessTokenTtl,
      ClientCredentials: (ctx, token, client) => client?.access_token_ttl ?? token.resourceServer?.accessTokenTTL ?? accessTokenTtl,
      AuthorizationCode: 60,
      Interaction: 600,
      Session: 3600,
      Grant: 3600,
      RefreshToken: 3600,
      IdToken: 600,
    },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  };
}

/** The scopes `username` may grant: the rest of a request is refused at consent (marked seen, so
 * the provider does not ask again) and left out of the token. */
export const allowedScopes = (username) => account(username)?.scopes ?? [];

export { account, bySub };
