// The lab page: wires sign-in, the tool catalog, the Tasks timeline, the simulation and the audit view.

import { AuditView } from "./audit.js";
import { el, rawJson } from "./dom.js";
import { schemaForm } from "./forms.js";
import { McpClient } from "./mcp.js";
import { claimsOf, discover, finishSignIn, signOut, startSignIn, storedSession } from "./oauth.js";
import { renderResult } from "./results.js";
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

function showIdentity(config, session, claims) {
  const expires = new Date(claims.exp * 1000);
  const rows = [
    ["Subject", claims.sub], ["Bank", claims[config.tenantClaim]], ["Client", claims.client_id],
    ["Scopes", claims.scope || "(none)"], ["Token expires", expires.toLocaleTimeString()],
  ];
  $("who").replaceChildren(...rows.flatMap(([name, value]) => [el("dt", {}, name), el("dd", { dataset: { field: name.toLowerCase() } }, value)]));
  $("who").hidden = false;
  $("sign-out").hidden = false;
  $("signed-out").hidden = true;
}

function toolCard(tool, granted, onCall, onStepUp) {
  const needed = tool._meta?.[REQUIRED_SCOPE];
  const lacking = needed && !granted.has(needed);
  return el("details", { class: "tool", dataset: { tool: tool.name } },
    el("summary", {}, el("strong", {}, tool.name), needed ? ` · needs ${needed}` : ""),
    el("p", {}, tool.description || ""),
    lacking ? el("p", { class: "needs-scope" }, `Your token lacks ${needed}. `,
      el("button", { type: "button", onclick: () => onStepUp(needed) }, `Ask for ${needed}`)) : null,
    schemaForm(tool.inputSchema, `Call ${tool.name}`, (args) => onCall(tool, args)));
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

  let session;
  try {
    session = (await finishSignIn(config)) || storedSession();
  } catch (error) {
    say(error.message, true);
    return;
  }
  if (!session) { say("Sign in as one of the demo users to start."); return; }
  const claims = claimsOf(session.accessToken);
  showIdentity(config, session, claims);
  $("lab").hidden = false;
  say(`Signed in as ${claims.sub}.`);

  const client = new McpClient(config.resource, session.accessToken);
  const granted = new Set((claims.scope || "").split(" ").filter(Boolean));
  const timeline = new TaskTimeline(client, $("task-rows"), $("follow-mode"), (message) => say(message));
  const audit = new AuditView(session.accessToken, $("audit-rows"), $("audit-note"), $("audit-filters"));
  audit.restart();

  const stepUp = async (scope) => {
    await startSignIn(config, [...new Set([...granted, scope])]);
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
        scope ? el("button", { type: "button", onclick: () => stepUp(scope) }, `Ask for ${scope}`) : null,
        rawJson(error.error ?? null, "Error"));
    }
  };

  try {
    const listed = await client.request("tools/list");
    $("tool-list").replaceChildren(...listed.tools.map((tool) => toolCard(tool, granted, call, stepUp)));
  } catch (error) {
    say(`tools/list failed: ${error.message}`, true);
  }

  const lastTask = () => [...timeline.tasks.keys()].at(-1);
  const simulation = new Simulation({ client, audit, session, claims, lastTask, output: $("simulation-results"),
    report: (message) => say(message) });
  const available = CASES.filter((c) => config.simulation.includes(c.kind));
  $("simulation-buttons").replaceChildren(...available.map((c) => el("button", { type: "button",
    dataset: { case: c.kind }, onclick: () => simulation.run(c.kind).catch((error) => say(error.message, true)) }, c.label)));
}

main().catch((error) => say(`The lab could not start: ${error.message}`, true));
