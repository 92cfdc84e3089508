/**
 * Writes `clicks.jsonl`, the example's input for `eos local --input`: a few hundred page views of 12 users over
 * three UTC days, on 2 partitions keyed by user, with what a real topic also carries: producer retries (the same
 * view sent again, same `eventId`, same bytes), malformed views the transform must reject, a tombstone, and views
 * that reach Kafka after midnight but happened the day before (the Kafka `timestamp` is the send time; `ts` in
 * the value is the event time the day is taken from).
 *
 *   npx tsx examples/clickstream/make-input.ts [records] > examples/clickstream/clicks.jsonl
 *
 * Deterministic (a fixed seed): the committed file is this script's output for the default 300 records.
 */

/** One line of an `eos local --input` file (docs/local.md, "The input file"). */
export interface InputLine {
  readonly partition: number;
  readonly key: string | null;
  readonly value: string | null;
  readonly headers?: Readonly<Record<string, string>>;
  readonly timestamp: number;
}

/** mulberry32: a small seeded generator, so the file is the same on every machine. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const DAY_MS = 86_400_000;
const FIRST_DAY = Date.UTC(2026, 10, 28); // 2026-11-28T00:00:00Z
const USERS = Array.from({ length: 12 }, (_, i) => `u-${String(i + 1).padStart(2, '0')}`);
const PAGES = ['/', '/pricing', '/docs', '/docs/deploy', '/blog', '/signup', '/checkout'];
const REFERRERS = ['search', 'newsletter', 'ads'];
const PARTITIONS = 2;

const partitionOf = (user: string): number => Number(user.slice(2)) % PARTITIONS;

/** The malformed views, one per way to be wrong (each becomes one dead-letter row with its reason). */
const MALFORMED: readonly ((user: string, ts: number) => string | null)[] = [
  (user, ts) => `{"eventId":"bad-json","userId":"${user}","page":"/","ts":${ts}`, // cut off
  (_user, ts) => JSON.stringify({ eventId: 'no-user', page: '/', ts }),
  (user, ts) =>
    JSON.stringify({ eventId: 'ts-text', userId: user, page: '/', ts: new Date(ts).toISOString() }),
  (user, ts) => JSON.stringify({ eventId: 'not-a-path', userId: user, page: 'pricing', ts }),
  (user, ts) => JSON.stringify({ eventId: 'bad-referrer', userId: user, page: '/', ts, referrer: 7 }),
  (user) => JSON.stringify([user, '/docs']),
  () => null, // a tombstone
];

export function makeClicks(records = 300, seed = 7): InputLine[] {
  const next = random(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const lines: InputLine[] = [];
  let eventNo = 0;
  for (let i = 0; i < records; i++) {
    const user = pick(USERS);
    const partition = partitionOf(user);
    const roll = next();
    // Event time: anywhere in the three days, with a share in the last minutes before midnight.
    const day = Math.floor(next() * 3);
    const offset = roll < 0.15 ? DAY_MS - 1 - Math.floor(next() * 120_000) : Math.floor(next() * DAY_MS);
    const ts = FIRST_DAY + day * DAY_MS + offset;
    // Sent 0-5 minutes later: a late-evening view can reach Kafka on the next day.
    const timestamp = ts + Math.floor(next() * 300_000);
    if (roll > 0.97) {
      lines.push({ partition, key: user, value: pick(MALFORMED)(user, ts), timestamp });
      continue;
    }
    const previous = lines.filter((line) => line.key === user && line.value?.includes('"eventId":"e-'));
    if (roll > 0.92 && previous.length > 0) {
      // A producer retry: the same record again, a little later.
      const again = pick(previous);
      lines.push({ ...again, timestamp: again.timestamp + 1_000 });
      continue;
    }
    eventNo++;
    const click = {
      eventId: `e-${String(eventNo).padStart(5, '0')}`,
      userId: user,
      page: pick(PAGES),
      ts,
      ...(next() < 0.3 ? { referrer: pick(REFERRERS) } : {}),
    };
    lines.push({ partition, key: user, value: JSON.stringify(click), timestamp });
  }
  // Every kind of malformed view at least once, whatever the draw.
  MALFORMED.forEach((malformed, i) => {
    const user = USERS[i % USERS.length]!;
    const ts = FIRST_DAY + DAY_MS + i * 60_000;
    lines.push({ partition: partitionOf(user), key: user, value: malformed(user, ts), timestamp: ts });
  });
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const records = process.argv[2] === undefined ? 300 : Number(process.argv[2]);
  if (!Number.isSafeInteger(records) || records < 1) {
    process.stderr.write('usage: make-input.ts [records ≥ 1]\n');
    process.exit(2);
  }
  for (const line of makeClicks(records)) process.stdout.write(`${JSON.stringify(line)}\n`);
}
