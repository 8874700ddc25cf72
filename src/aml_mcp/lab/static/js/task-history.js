// What the page knows of one task, from every state it observed (the create result, each
// `notifications/tasks` of the listen stream, each `tasks/get` when polling): the states it went
// through and when (the server's `lastUpdatedAt`), the status messages said in each, and the
// structured progress (`_meta["aml-mcp/progress"]`: `{done, total}`) when the server sends it.
// No DOM here: the state machine and the timeline are drawn from it (and it is unit-tested in Node).

export const STATES = ["working", "input_required", "completed", "failed", "cancelled"];
export const TERMINAL = new Set(["completed", "failed", "cancelled"]);
/** Every transition the Tasks extension allows: the edges of the state machine. */
export const EDGES = [
  ["working", "input_required"], ["input_required", "working"],
  ["working", "completed"], ["working", "failed"], ["working", "cancelled"],
  ["input_required", "completed"], ["input_required", "failed"], ["input_required", "cancelled"],
];
export const PROGRESS_KEY = "aml-mcp/progress";
const KEPT_MESSAGES = 200;
/** Clocks closer than this are taken as one (the page then measures time in a state from the
 * server's timestamps); farther apart, from when the page saw the state. */
const SAME_CLOCK_MS = 2000;

/** The task's structured progress, `{done, total}` (`total` null when unknown), or null. */
export function progressOf(state) {
  const progress = state?._meta?.[PROGRESS_KEY];
  if (!progress || typeof progress !== "object") return null;
  const done = Number(progress.done);
  const total = progress.total === undefined || progress.total === null ? null : Number(progress.total);
  if (!Number.isFinite(done) || done < 0) return null;
  if (total === null || !Number.isFinite(total) || total <= 0) return { done, total: null };
  return { done: Math.min(done, total), total };
}

function serverTime(state) {
  const at = Date.parse(state?.lastUpdatedAt ?? state?.createdAt ?? "");
  return Number.isFinite(at) ? at : null;
}

export class TaskHistory {
  constructor() {
    /** One segment per state entered: `{status, start, seenAt, end, messages: [{text, at}], dropped}`. */
    this.segments = [];
    this.progress = null;
    this.latest = null;
    this.newest = -Infinity;
  }

  get status() {
    return this.segments.at(-1)?.status ?? null;
  }

  get terminal() {
    return TERMINAL.has(this.status);
  }

  /** Takes one observed state; returns whether anything the page shows changed. */
  observe(state, now = Date.now()) {
    if (!state || !STATES.includes(state.status) || this.terminal) return false;
    const stamped = serverTime(state);
    // A state older than one already seen (a poll answered after a newer notification) is stale.
    if (stamped !== null && stamped < this.newest) return false;
    const at = stamped ?? now;
    if (stamped !== null) this.newest = stamped;
    this.latest = state;
    let changed = false;
    let segment = this.segments.at(-1);
    if (!segment || segment.status !== state.status) {
      if (segment) segment.end = Math.max(at, segment.start);
      segment = { status: state.status, start: at, seenAt: now, end: null, messages: [], dropped: 0 };
      this.segments.push(segment);
      changed = true;
    }
    const text = typeof state.statusMessage === "string" ? state.statusMessage : "";
    if (text && segment.messages.at(-1)?.text !== text) {
      segment.messages.push({ text, at });
      if (segment.messages.length > KEPT_MESSAGES) {
        segment.messages.shift();
        segment.dropped += 1;
      }
      changed = true;
    }
    const progress = progressOf(state);
    if (progress && (progress.done !== this.progress?.done || progress.total !== this.progress?.total)) {
      this.progress = progress;
      changed = true;
    }
    return changed;
  }

  /** The transitions taken, in order: `[{from, to, at}]`. */
  transitions() {
    return this.segments.slice(1).map((segment, index) => ({
      from: this.segments[index].status, to: segment.status, at: segment.start,
    }));
  }

  /** How often each edge was taken: `"from>to"` → count. */
  edgeCounts() {
    const counts = new Map();
    for (const { from, to } of this.transitions()) counts.set(`${from}>${to}`, (counts.get(`${from}>${to}`) || 0) + 1);
    return counts;
  }

  /** Milliseconds spent in `status`, summed over its segments (the open one up to `now`). */
  timeIn(status, now = Date.now()) {
    return this.segments.filter((segment) => segment.status === status)
      .reduce((sum, segment) => sum + (this.duration(segment, now) ?? 0), 0);
  }

  /** A segment's length: closed, from the server's timestamps; open, up to `now`; terminal, null. */
  duration(segment, now = Date.now()) {
    if (segment.end !== null) return segment.end - segment.start;
    if (TERMINAL.has(segment.status)) return null;
    const since = Math.abs(segment.seenAt - segment.start) <= SAME_CLOCK_MS ? segment.start : segment.seenAt;
    return Math.max(0, now - since);
  }

  /** Every state entered, once each, in the order first entered. */
  visited() {
    return [...new Set(this.segments.map((segment) => segment.status))];
  }
}
