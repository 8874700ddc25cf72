// The audit view's rows: consecutive records of the same decision — the same method, target,
// decision, reason, subject and client — fold into one row with a count and the span of their
// times, so a client polling a task is one row that counts up, not a wall. The filter by task
// matches the record's `target`, which holds the first 8 characters of a task id. No DOM here.

export const FOLDED_BY = ["method", "target", "decision", "reason", "subject", "client_id"];
export const TASK_REFERENCE = 8;

export function foldKey(event) {
  return JSON.stringify(FOLDED_BY.map((name) => event[name] ?? null));
}

/**
 * Whether `event` is about the task `query` names: a whole id (its first 8 characters are the
 * record's target: `tasks/*`, and the `tools/call` that created it), or the start of one.
 */
export function aboutTask(event, query) {
  const wanted = String(query ?? "").trim();
  if (!wanted) return true;
  if (typeof event.target !== "string") return false;
  if (wanted.length >= TASK_REFERENCE) return event.target === wanted.slice(0, TASK_REFERENCE);
  // A shorter query matches task references only, not the tool names other calls target.
  return event.target.length === TASK_REFERENCE && event.target.startsWith(wanted);
}

/** Folds records (oldest first) into groups: `{key, first, last, count, events}` (oldest first). */
export class AuditFolds {
  constructor() {
    this.groups = [];
  }

  /** Adds the next record (oldest first); returns its group and whether the group is new. */
  add(event) {
    const key = foldKey(event);
    const last = this.groups.at(-1);
    if (last && last.key === key) {
      last.last = event;
      last.count += 1;
      return { group: last, created: false };
    }
    const group = { key, first: event, last: event, count: 1 };
    this.groups.push(group);
    return { group, created: true };
  }

  static of(events) {
    const folds = new AuditFolds();
    for (const event of events) folds.add(event);
    return folds;
  }
}
