/**
 * How `eos status` reads checkpoint items. The coordinator owns their shape (`shared/ledger/checkpoints.ts`);
 * this module is the one place that translates them into the status view, so a change there touches only this
 * file. It is lenient on purpose: a status command must still show what it can of an item it half understands.
 */
export interface CheckpointView {
  readonly id: number;
  /** As stored (for example BEGUN, PREPARED, COMMITTING, COMMITTED, ABORTED). */
  readonly status: string;
  readonly startedAt?: number;
  readonly updatedAt?: number;
  /** When it reached COMMITTED or ABORTED. */
  readonly endedAt?: number;
  /** Per partition (`<topic>#<partition>`), the staged offset taken as the cut at begin (C2). */
  readonly cut: ReadonlyMap<string, number>;
  /** Why it aborted, when recorded. */
  readonly reason?: string;
}

export const TERMINAL_STATUSES = { committed: 'COMMITTED', aborted: 'ABORTED' } as const;

export function isCommitted(view: CheckpointView): boolean {
  return view.status === TERMINAL_STATUSES.committed;
}

export function isAborted(view: CheckpointView): boolean {
  return view.status === TERMINAL_STATUSES.aborted;
}

export function isInFlight(view: CheckpointView): boolean {
  return !isCommitted(view) && !isAborted(view);
}

/** Translates one stored checkpoint item (not the HEAD) into the view; undefined for an unreadable item. */
export function toCheckpointView(item: Record<string, unknown>): CheckpointView | undefined {
  const id = numberOf(item.id ?? item.checkpointId ?? item.sk);
  const status = item.status ?? item.state;
  if (id === undefined || typeof status !== 'string') return undefined;
  const upper = status.toUpperCase();
  return {
    id,
    status: upper,
    startedAt: numberOf(item.startedAt ?? item.begunAt ?? item.createdAt),
    updatedAt: numberOf(item.updatedAt),
    endedAt: numberOf(item.committedAt ?? item.abortedAt ?? item.endedAt),
    cut: cutOf(item.cut),
    reason:
      typeof item.reason === 'string'
        ? item.reason
        : typeof item.abortReason === 'string'
          ? item.abortReason
          : undefined,
  };
}

function numberOf(value: unknown): number | undefined {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  if (typeof value === 'string' && /^\d+$/.test(value)) return Number(value);
  return undefined;
}

/** A cut stored as `{ "<topic>#<p>": offset }` or as `[{ topic, partition, offset }]`. */
function cutOf(value: unknown): ReadonlyMap<string, number> {
  const cut = new Map<string, number>();
  if (Array.isArray(value)) {
    for (const entry of value as Record<string, unknown>[]) {
      const partition = numberOf(entry.partition);
      const offset = numberOf(entry.offset ?? entry.stagedOffset);
      if (typeof entry.topic === 'string' && partition !== undefined && offset !== undefined) {
        cut.set(`${entry.topic}#${partition}`, offset);
      }
    }
  } else if (typeof value === 'object' && value !== null) {
    for (const [name, offset] of Object.entries(value)) {
      const parsed = numberOf(offset);
      if (parsed !== undefined && name.includes('#')) cut.set(name, parsed);
    }
  }
  return cut;
}
