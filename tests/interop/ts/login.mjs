#!/usr/bin/env node
// The browser step of an OAuth login against aml-mcp's development authorization server, done the
// way a person would: open the authorization URL, fill in the login/consent form as a demo user,
// approve, and follow the redirect back to the client's loopback callback.
//
//   import { approve } from "./login.mjs"      approve(url, user) → the redirect Location
//   BROWSER=./login.mjs  (xdg-open runs it)     logs in as $AML_MCP_DEMO_USER (default carol) and
//                                               visits the callback, as a browser would
//
// Demo users' passwords are their names (development server only).

const ENTITIES = { "&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#x27;": "'", "&#39;": "'" };
const unescape = (text) => text.replace(/&(?:amp|lt|gt|quot|#x27|#39);/g, (m) => ENTITIES[m]);

/** The hidden fields of the login page's form (request parameters and the consent MAC). */
export function hiddenFields(html) {
  const fields = [];
  for (const [tag] of html.matchAll(/<input\b[^>]*>/g)) {
    const attr = (name) => tag.match(new RegExp(`\\b${name}='([^']*)'`))?.[1];
    if (attr("type") === "hidden" && attr("name")) fields.push([unescape(attr("name")), unescape(attr("value") ?? "")]);
  }
  return fields;
}

/** Logs in as `user` and approves; returns where the server redirects the browser (the callback). */
export async function approve(authorizationUrl, user, { decision = "approve" } = {}) {
  const page = await fetch(authorizationUrl, { redirect: "manual" });
  if (page.status !== 200) throw new Error(`login page: HTTP ${page.status} ${await page.text()}`);
  const form = new URLSearchParams(hiddenFields(await page.text()));
  form.append("username", user);
  form.append("password", user);
  form.append("decision", decision);
  const answer = await fetch(authorizationUrl, { method: "POST", body: form, redirect: "manual" });
  const location = answer.headers.get("location");
  if (answer.status !== 302 || !location) {
    throw new Error(`consent did not redirect: HTTP ${answer.status} ${(await answer.text()).slice(0, 300)}`);
  }
  return location;
}

/** As a browser: log in, approve, then load the callback page the client is listening on. */
export async function browse(authorizationUrl, user) {
  const location = await approve(authorizationUrl, user);
  const callback = await fetch(location, { redirect: "manual" });
  await callback.arrayBuffer();
  return location;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const url = process.argv[2];
  const user = process.env.AML_MCP_DEMO_USER || "carol";
  browse(url, user).then(
    (location) => process.stderr.write(`login.mjs: ${user} approved, redirected to ${new URL(location).origin}\n`),
    (error) => {
      process.stderr.write(`login.mjs: ${error.stack ?? error}\n`);
      process.exit(1);
    },
  );
}
