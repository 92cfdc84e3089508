/**
 * Clickstream: page views as JSON, one output row per view and a count of views per user per day.
 *
 * Value: `{"eventId": "e-…", "userId": "u-…", "page": "/…", "ts": <epoch ms>, "referrer"?: "…"}`. The day is the
 * UTC calendar day of `ts` (the event time, not the Kafka timestamp: a view sent late still counts on the day it
 * happened). Anything else is rejected with a reason and becomes one dead-letter row; nothing here is retried.
 *
 * Copy this file, change the types and the checks, and run it:
 *   npx eos local --transform ./transform.ts --input clicks.jsonl --idempotency-key json:eventId
 */
import { defineTransform, RejectRecord } from 'msk-exactly-once-pipeline/transform';

/** A page view as producers send it. */
export interface Click {
  readonly eventId: string;
  readonly userId: string;
  readonly page: string;
  /** When the view happened, epoch milliseconds. */
  readonly ts: number;
  readonly referrer?: string;
}

/** The UTC calendar day of an epoch-milliseconds instant, `YYYY-MM-DD`. */
export function utcDay(ts: number): string {
  return new Date(ts).toISOString().slice(0, 10);
}

/** The decoded JSON value as a {@link Click}, or a rejection naming the first thing wrong with it. */
function checkClick(value: unknown): Click {
  if (value === null) throw new RejectRecord('tombstone: a page view cannot be deleted');
  if (typeof value !== 'object' || Array.isArray(value)) throw new RejectRecord('value is not a JSON object');
  const click = value as Record<string, unknown>;
  for (const field of ['eventId', 'userId', 'page'] as const) {
    if (typeof click[field] !== 'string' || click[field] === '') {
      throw new RejectRecord(`field "${field}" is missing or not a non-empty string`);
    }
  }
  if (!(click.page as string).startsWith('/')) throw new RejectRecord('field "page" is not a path');
  // Integers from 0 up to year 9999: Date cannot place anything else on a calendar day.
  if (!Number.isSafeInteger(click.ts) || (click.ts as number) < 0 || (click.ts as number) > 253402300799999) {
    throw new RejectRecord('field "ts" is not epoch milliseconds');
  }
  if (click.referrer !== undefined && typeof click.referrer !== 'string') {
    throw new RejectRecord('field "referrer" is not a string');
  }
  return click as unknown as Click;
}

export default defineTransform({
  name: 'clickstream',
  value: { format: 'json' },
  schema: {
    eventId: 'string',
    userId: 'string',
    page: 'string',
    ts: 'timestamp',
    day: 'string',
    referrer: { type: 'string', nullable: true },
  },
  transform({ value }) {
    const { eventId, userId, page, ts, referrer } = checkClick(value);
    const day = utcDay(ts);
    return {
      rows: [{ eventId, userId, page, ts, day, referrer: referrer ?? null }],
      // One state entry per user and day; `views` is summed, `userId` and `day` are set (for reading it back).
      state: [{ key: `${userId}#${day}`, fields: { userId, day }, add: { views: 1 } }],
    };
  },
});
