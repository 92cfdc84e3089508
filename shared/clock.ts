/** The clock is injected everywhere, so that leases, TTLs and grace periods are testable. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

const HOUR_MS = 3_600_000;
let origin: number | undefined;

/**
 * Where a clock that moves only when told starts by default: the whole hour before the current one.
 *
 * Not a fixed date: the ledger's TTL attribute (`expiresAt`) is written from this clock, and DynamoDB Local, like
 * DynamoDB, deletes an item once that attribute is below the real time (Local within about a second). A clock
 * lagging real time by more than a TTL (a day at the least, `idempotencyTtlSeconds`) would see claims it holds
 * live vanish, and a second record with the same key create its claim again.
 *
 * Behind real time rather than ahead of it, so that an object's Last-Modified, which the S3 server stamps in real
 * time, never looks older than the orphan grace until the clock is advanced past it on purpose. Whole hours keep
 * hour boundaries where they fall on every run. Fixed at its first use, so every such clock of a process starts at
 * the same instant, as they did when it was a constant.
 */
export function clockOrigin(): number {
  origin ??= Math.floor(Date.now() / HOUR_MS) * HOUR_MS - HOUR_MS;
  return origin;
}

/** A clock that moves only when told to. */
export class ManualClock implements Clock {
  constructor(private current = clockOrigin()) {}
  now(): number {
    return this.current;
  }
  advance(ms: number): void {
    this.current += ms;
  }
}
