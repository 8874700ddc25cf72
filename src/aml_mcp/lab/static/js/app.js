// The lab page: wires sign-in, the tool catalog, the Tasks view, the simulation and the audit view.
// It sends no request the signed-in user's token would be refused: what each view needs is compared
// with the token's scopes (the server's hierarchy applied) first, and the page says why it holds back.

import { AuditView } from "./audit.js";
import { clock, duration, el, rawJson } from "./dom.js";
import { schemaForm } from "./forms.js";
import { McpClient } from "./mcp.js";
import { claimsOf, discover, finishSignIn, signOut, startSignIn, storedSession } from "./oauth.js";
import { renderResult } from "./results.js";
import { covers, effectiveScopes, grantedScopes } from "./scopes.js";
import { CASES, Simulation } from "./simulation.js";
import { TaskTimeline } from "./tasks.js";

const $ = (id) => document.getElementById(id);
const REQUIRED_SCOPE = "aml-mcp/requiredScope";

function say(message, error = false) {
  $("status").textContent = message;
  $("status").classList.toggle("error", error);
}

async function scopesToAsk(config) {
  const { protectedResource } = await discover(config.resource);
  // Everything the resource knows, and the audit view's scope: the server grants what the user holds.
  return [...new Set([...(protectedResource.scopes_supported || []), config.auditScope])];
}

function showDemoUsers(config) {
  const users = config.demoUsers || [];
  if (!users.length) return;
  $("demo-users").tBodies[0].replaceChildren(...users.map((user) => el("tr", { dataset: { user: user.username } },
    el("td", {}, el("code", {}, user.username)), el("td", {}, user.bank),
    el("td", {}, user.scopes.join(" ")), el("td", {}, user.description))));
  $("welcome").hidden = false;
}

function showIdentity(config, claims, effective) {
  const expires = claims.exp * 1000;
  const implied = [...effective].filter((scope) => !grantedScopes(claims).includes(scope)).sort();
  const rows = [
    ["Subject", claims.sub], ["Bank", claims[config.tenantClaim]], ["Client", claims.client_id],
    ["Scopes", `${claims.scope || "(none)"}${implied.length ? ` (implies ${implied.join(" ")})` : ""}`],
    ["Token expires", `${clock(expires)} (in ${duration(Math.max(0, expires - Date.now()))})`],
  ];
  $("who").replaceChildren(...rows.flatMap(([name, value]) => [el("dt", {}, name), el("dd", { dataset: { field: name.toLowerCase() } }, value)]));
  $("who").hidden = false;
  $("sign-out").hidden = false;
  $("signed-out").hidden = true;
}

/** Why a scope is missing: withheld by the authorization server at sign-in, or never asked for. */
function lacking(scope, withheld, claims, onStepUp) {
  if (withheld.has(scope)) {
    return el("p", { class: "needs-scope", dataset: { withheld: scope } },
      `Your token lacks ${scope}: the authorization server did not grant it when you signed in (${claims.sub} does not hold it), `
      + "so this page does not call the tool. Signing in again would not change that.");
  }
  return el("p", { class: "needs-scope", dataset: { lacking: scope } }, `Your token lacks ${scope}. `,
    el("button", { type: "button", onclick: () => onStepUp(scope) }, `Ask for ${scope}`));
}

function toolCard(tool, { effective, withheld, claims, onCall, onStepUp }) {
  const needed = tool._meta?.[REQUIRED_SCOPE];
  const allowed = covers(effective, needed);
  const form = schemaForm(tool.inputSchema, `Call ${tool.name}`, (args) => onCall(tool, args));
  return el("details", { class: "tool", dataset: { tool: tool.name } },
    el("summary", {}, el("strong", {}, tool.name), needed ? el("span", { class: "tool-meta" }, ` · needs ${needed}`) : ""),
    el("p", {}, tool.description || ""),
    allowed ? form : [lacking(needed, withheld, claims, onStepUp), el("fieldset", { class: "plain", disabled: true }, form)]);
}

async function main() {
  const config = await (await fetch("/lab/config.json")).json();
  $("sign-in").addEventListener("click", async () => {
    try {
      await startSignIn(config, await scopesToAsk(config));
    } catch (error) {
      say(`Sign-in could not start: ${error.message}`, true);
    }
  });
  $("sign-out").addEventListener("click", () => { signOut(); location.reload(); });
  $("sign-in").disabled = false; // enabled once it does something (a click before would be lost)

  let session;
  try {
    session = (await finishSignIn(config)) || storedSession();
  } catch (error) {
    say(error.message, true);
    showDemoUsers(config);
    return;
  }
  if (!session) {
    say(config.demoUsers?.length ? "Sign in as one of the demo users below to start." : "Sign in to start.");
    showDemoUsers(config);
    return;
  }
  const claims = claimsOf(session.accessToken);
  const effective = effectiveScopes(grantedScopes(claims), config.scopeImplies || {});
  const withheld = new Set((session.asked || []).filter((scope) => !effective.has(scope)));
  showIdentity(config, claims, effective);
  $("lab").hidden = false;
  if (session.fresh && session.stepUp && withheld.has(session.stepUp)) {
    // F13: the step-up came back without the scope. Say so, rather than offer the same loop again.
    say(`The authorization server did not grant ${session.stepUp}: ${claims.sub} does not hold it. `
      + `Signed in as ${claims.sub} with ${claims.scope || "no scope"}.`, true);
  } else {
    say(`Signed in as ${claims.sub}.`);
  }

  const client = new McpClient(config.resource, session.accessToken);
  const auditAllowed = covers(effective, config.auditScope);
  const audit = new AuditView(session.accessToken, {
    tbody: $("audit-rows"), note: $("audit-note"), form: $("audit-filters"), allowed: auditAllowed,
    scope: config.auditScope,
    why: `The audit view needs ${config.auditScope}, which your token does not grant`
      + `${withheld.has(config.auditScope) ? ` (the authorization server did not grant it: ${claims.sub} does not hold it)` : ""}. `
      + `The page does not ask for what it would be refused; a user holding ${config.auditScope} sees the bank's records here.`,
  });
  audit.start();
  const timeline = new TaskTimeline(client, $("task-list"), $("follow-mode"), (message) => say(message), {
    onAudit: auditAllowed ? (taskId) => { audit.showTask(taskId); $("audit").scrollIntoView(); } : null,
  });

  const stepUp = async (scope) => {
    await startSignIn(config, [...new Set([...grantedScopes(claims), scope])], { stepUp: scope });
  };
  const call = async (tool, args) => {
    say(`Calling ${tool.name}…`);
    $("tool-result").replaceChildren();
    try {
      const result = await client.request("tools/call", { name: tool.name, arguments: args });
      if (result.resultType === "task") {
        timeline.add(tool.name, result);
        say(`${tool.name} started as task ${result.taskId.slice(0, 8)}…; see Tasks.`);
      } else {
        $("tool-result").replaceChildren(el("h3", {}, `${tool.name} result`), renderResult(result));
        say(`${tool.name} answered.`);
      }
    } catch (error) {
      const scope = /scope="([^"]+)"/.exec(error.challenge || "")?.[1];
      say(`${tool.name}: ${error.message}${scope ? ` (needs ${scope})` : ""}`, true);
      $("tool-result").replaceChildren(el("p", { class: "decision-deny" }, `HTTP ${error.status}: ${error.message}`),
        scope && !withheld.has(scope) ? el("button", { type: "button", onclick: () => stepUp(scope) }, `Ask for ${scope}`) : null,
        rawJson(error.error ?? null, "Error"));
    }
  };

  let tools = [];
  try {
    tools = (await client.request("tools/list")).tools;
    $("tool-list").replaceChildren(...tools.map((tool) => toolCard(tool, { effective, withheld, claims, onCall: call, onStepUp: stepUp })));
  } catch (error) {
    say(`tools/list failed: ${error.message}`, true);
  }

  const lastTask = () => [...timeline.tasks.keys()].at(-1);
  const canCompare = (method, params) => method !== "tools/call"
    || covers(effective, tools.find((tool) => tool.name === params.name)?._meta?.[REQUIRED_SCOPE]);
  const simulation = new Simulation({ client, audit, session, claims, lastTask, output: $("simulation-results"),
    report: (message) => say(message), canCompare });
  const available = CASES.filter((c) => config.simulation.includes(c.kind));
  $("simulation-buttons").replaceChildren(...available.map((c) => el("button", { type: "button",
    dataset: { case: c.kind }, onclick: () => simulation.run(c.kind).catch((error) => say(error.message, true)) }, c.label)));
}

main().catch((error) => say(`The lab could not start: ${error.message}`, true));
