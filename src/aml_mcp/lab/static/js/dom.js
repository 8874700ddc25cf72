// Building DOM nodes without innerHTML: every string from the server or a token is text, never markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(node, attributes, children) {
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function el(tag, attributes = {}, ...children) {
  return build(document.createElement(tag), attributes, children);
}

/** The same for SVG elements (the state machine): created in the SVG namespace. */
export function svg(tag, attributes = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attributes, children);
}

/** Text with `**marked**` runs shown as <mark>, as the search snippets mark the query's words. */
export function marked(text) {
  const parts = String(text).split(/\*\*(.+?)\*\*/g);
  return parts.map((part, index) => (index % 2 ? el("mark", {}, part) : document.createTextNode(part)));
}

export function rawJson(value, label = "Raw JSON") {
  return el("details", { class: "raw" }, el("summary", {}, label), el("pre", {}, JSON.stringify(value, null, 2)));
}

// Every time on the page is in UTC, the zone the server's timestamps and audit records are in,
// and says so: one zone everywhere.

function utc(ms) {
  return new Date(ms).toISOString();
}

/** `14:03:27 UTC` */
export function clock(ms) {
  return `${utc(ms).slice(11, 19)} UTC`;
}

/** `14:03:27.412` (no zone: for a column or list whose heading names it). */
export function preciseClock(ms) {
  return utc(ms).slice(11, 23);
}

/** `2026-07-28 14:03:27 UTC` */
export function time(ms) {
  return `${utc(ms).slice(0, 10)} ${clock(ms)}`;
}

/** An ISO 8601 timestamp from the server as `time` shows it (the text itself if it is not one). */
export function isoTime(text) {
  const ms = Date.parse(text ?? "");
  return Number.isFinite(ms) ? time(ms) : String(text ?? "—");
}

/** `820 ms`, `4.2 s`, `3 min 12 s`, `1 h 04 min`. */
export function duration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  const seconds = Math.round(ms / 1000);
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, "0")} s`;
  return `${Math.floor(seconds / 3600)} h ${String(Math.floor(seconds / 60) % 60).padStart(2, "0")} min`;
}
