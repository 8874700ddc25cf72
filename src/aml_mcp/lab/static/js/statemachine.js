// The Tasks state machine of one task, drawn in SVG: every state and every transition the
// extension allows, the states this task went through and the transitions it took drawn strong
// (with a count when taken more than once), and its current state lit. Redrawn from the task's
// `TaskHistory` whenever it changes. Nodes carry `data-node` (and `data-lit` on the current one),
// edges `data-edge="from>to"` (and `data-taken` with the count): what the browser tests read.

import { duration, svg } from "./dom.js";
import { EDGES, STATES, TERMINAL } from "./task-history.js";

const WIDTH = 460;
const HEIGHT = 206;
const NODE_W = 136;
const NODE_H = 42;
/** Node centres: the live states on the left, the three final ones on the right. */
const AT = {
  working: [112, 56], input_required: [112, 160],
  completed: [370, 32], failed: [370, 103], cancelled: [370, 174],
};
const LABEL = { working: "working", input_required: "input_required", completed: "completed", failed: "failed", cancelled: "cancelled" };

let drawn = 0;

function edgePath(from, to) {
  const [fx, fy] = AT[from];
  const [tx, ty] = AT[to];
  if (from === "working" && to === "input_required") return { d: `M ${fx - 24} ${fy + NODE_H / 2} L ${tx - 24} ${ty - NODE_H / 2 - 2}`, label: [fx - 34, (fy + ty) / 2] };
  if (from === "input_required" && to === "working") return { d: `M ${fx + 24} ${fy - NODE_H / 2} L ${tx + 24} ${ty + NODE_H / 2 + 2}`, label: [fx + 34, (fy + ty) / 2] };
  // Into a final state: leave the live state's right side, arrive on the final state's left side
  // (above its middle from `working`, below from `input_required`, so the arrowheads never meet).
  const x1 = fx + NODE_W / 2;
  const y1 = fy + (ty - fy) * 0.12;
  const x2 = tx - NODE_W / 2 - 2;
  const y2 = ty + (from === "working" ? -7 : 7);
  const bend = (x2 - x1) * 0.45;
  return { d: `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`, label: [(x1 + x2) / 2, (y1 + y2) / 2 - 5] };
}

function arrowHead(id, className) {
  return svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerUnits: "userSpaceOnUse", markerWidth: 10, markerHeight: 10,
    orient: "auto-start-reverse" },
    svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: className }));
}

/** The state machine of the task `history` describes, as an `<svg>` (drawn anew on every change). */
export function stateMachine(history, now = Date.now()) {
  const id = `sm${++drawn}`;
  const current = history.status;
  const counts = history.edgeCounts();
  const transitions = history.transitions();
  const last = transitions.at(-1);
  const visited = new Set(history.visited());
  const path = [history.segments[0]?.status, ...transitions.map((t) => t.to)].filter(Boolean).join(" → ");
  const title = `Tasks state machine. Current state: ${current ?? "unknown"}. Path: ${path || "none yet"}.`;

  const edges = EDGES.map(([from, to]) => {
    const key = `${from}>${to}`;
    const taken = counts.get(key) || 0;
    const { d, label } = edgePath(from, to);
    const latest = last && last.from === from && last.to === to;
    return svg("g", { class: `edge${taken ? " taken" : ""}${latest ? " latest" : ""}`, dataset: taken ? { edge: key, taken: String(taken) } : { edge: key } },
      svg("path", { d, "marker-end": `url(#${id}-${taken ? "taken" : "open"})` }),
      taken > 1 ? svg("text", { x: label[0], y: label[1], class: "edge-count", "text-anchor": "middle" }, `×${taken}`) : null);
  });

  const nodes = STATES.map((state) => {
    const [cx, cy] = AT[state];
    const lit = state === current;
    const spent = TERMINAL.has(state) ? null : history.timeIn(state, now);
    const classes = ["node", `node-${state}`, visited.has(state) ? "visited" : "unvisited", lit ? "lit" : ""].filter(Boolean).join(" ");
    const showTime = visited.has(state) && spent !== null;
    return svg("g", { class: classes, dataset: lit ? { node: state, lit: "true" } : { node: state } },
      svg("rect", { x: cx - NODE_W / 2, y: cy - NODE_H / 2, width: NODE_W, height: NODE_H, rx: 10 }),
      svg("text", { x: cx, y: showTime ? cy - 3 : cy + 4, "text-anchor": "middle", class: "node-name" }, LABEL[state]),
      showTime ? svg("text", { x: cx, y: cy + 13, "text-anchor": "middle", class: "node-time" }, duration(spent)) : null);
  });

  return svg("svg", { class: "state-machine", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-labelledby": `${id}-title`,
    dataset: { current: current ?? "" } },
  svg("title", { id: `${id}-title` }, title),
  svg("defs", {}, arrowHead(`${id}-open`, "head-open"), arrowHead(`${id}-taken`, "head-taken")),
  svg("circle", { cx: 10, cy: AT.working[1], r: 5, class: "start" }),
  svg("path", { d: `M 15 ${AT.working[1]} L ${AT.working[0] - NODE_W / 2 - 2} ${AT.working[1]}`, class: "start-edge", "marker-end": `url(#${id}-taken)` }),
  svg("g", { class: "edges" }, edges),
  svg("g", { class: "nodes" }, nodes));
}
