// Tool results rendered for people: search hits with their marked snippets, SAR drafts with their
// code checks, anything else as text — and the raw JSON on demand.

import { el, marked, rawJson } from "./dom.js";

function searchHits(structured) {
  return el("ol", { class: "hits" }, structured.results.map((hit) =>
    el("li", {},
      el("div", {}, el("strong", {}, hit.note_id), ` · case ${hit.case_id}`,
        hit.created_at ? ` · ${hit.created_at.slice(0, 10)}` : "", ` · score ${Number(hit.score).toFixed(3)}`),
      el("div", { class: "snippet" }, marked(hit.snippet)),
      hit.subjects?.length ? el("div", { class: "tool-meta" },
        `Subjects: ${hit.subjects.map((s) => s.name + (s.account_id ? ` (${s.account_id})` : "")).join(", ")}`) : null)));
}

function sarDrafts(structured) {
  return el("div", {},
    el("p", {}, `${structured.drafted} drafted, ${structured.not_found} not found, ${structured.passed} passing every check.`),
    el("ul", { class: "drafts" }, structured.cases.map((entry) =>
      el("li", {},
        el("strong", {}, entry.case_id), ` — ${entry.status}`, entry.message ? `: ${entry.message}` : "",
        entry.checks ? el("ul", { class: "checks" }, entry.checks.map((check) =>
          el("li", { class: check.passed ? "pass" : "fail" },
            `${check.passed ? "✓ pass" : "✗ fail"} ${check.name}: ${check.detail}`))) : null))));
}

export function renderResult(result) {
  const structured = result?.structuredContent;
  let body;
  if (structured && Array.isArray(structured.results)) body = searchHits(structured);
  else if (structured && Array.isArray(structured.cases)) body = sarDrafts(structured);
  else body = el("div", {}, (result?.content || []).filter((c) => c.type === "text").map((c) => el("pre", {}, c.text)));
  return el("div", { class: "result" },
    result?.isError ? el("p", { class: "decision-deny" }, "The tool reported an error.") : null,
    body, rawJson(result));
}
