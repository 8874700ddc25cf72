// The browser step of a login at the oidc-provider of configuration.mjs, done as a person would:
// follow the authorization request to the sign-in page (keeping the provider's cookies), sign in as
// a user (password = user name), which also consents, and stop at the redirect back to the client.
//
//   import { signIn } from "../oidc/sign-in.mjs"    signIn(url, user) → the redirect Location

/** Cookies per name, as a browser keeps them for the provider's origin (paths are all under /). */
function jar() {
  const cookies = new Map();
  return {
    take(response) {
      for (const line of response.headers.getSetCookie()) {
        const [pair] = line.split(";");
        const at = pair.indexOf("=");
        cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
      }
    },
    header: () => [...cookies].map(([name, value]) => `${name}=${value}`).join("; "),
  };
}

/** Signs in as `user` at the provider `authorizationUrl` is on; returns the redirect to the client. */
export async function signIn(authorizationUrl, user) {
  const provider = new URL(authorizationUrl).origin;
  const cookies = jar();
  const go = async (url, init = {}) => {
    const response = await fetch(url, { ...init, redirect: "manual", headers: { ...init.headers, cookie: cookies.header() } });
    cookies.take(response);
    return response;
  };
  // Follows the provider's redirects; the page it stops at, or the first location off the provider.
  const follow = async (url, response) => {
    for (let hops = 0; hops < 10; hops++) {
      if (![302, 303].includes(response.status)) return { url, page: response };
      url = new URL(response.headers.get("location"), url).href;
      if (new URL(url).origin !== provider) return { url, away: true };
      response = await go(url);
    }
    throw new Error("too many redirects at the provider");
  };
  const first = await follow(authorizationUrl, await go(authorizationUrl));
  if (first.away) return first.url;
  const html = await first.page.text();
  const action = html.match(/<form[^>]*action="([^"]+)"/)?.[1];
  if (!action) throw new Error(`no sign-in form: HTTP ${first.page.status} ${html.slice(0, 300)}`);
  const target = new URL(action.replace(/&#(\d+);/g, (_, c) => String.fromCharCode(c)), first.url).href;
  const body = new URLSearchParams({ username: user, password: user });
  const signed = await follow(
    target,
    await go(target, { method: "POST", body, headers: { "content-type": "application/x-www-form-urlencoded" } }),
  );
  if (!signed.away) throw new Error(`sign-in did not lead back: HTTP ${signed.page.status} ${(await signed.page.text()).slice(0, 300)}`);
  return signed.url;
}
