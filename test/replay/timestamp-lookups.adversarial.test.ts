/**
 * Adversarial interleavings of the time lookups of `eos replay --from-timestamp [--to-timestamp]`: the port answers
 * `{offset, found}`, the kafkajs adapter reads the ends after the lookup, `--to-timestamp` always bounds by the
 * answer, times are limited to what a Date holds, brokers unusable exit 3.
 * Real DynamoDB Local and S3 server. kafkajs's admin is, per test, either the real kafkajs 2.x (a closed port: its
 * own retry and error chain), a stub that answers as kafkajs 2.x does over an emulated log, or a fake `Kafka`
 * behind the CLI's `--bootstrap-servers` path (vi.mock below: only brokers a test registers are faked, the rest
 * are kafkajs's own).
 */
import net from 'node:net';
import kafkajs, { Kafka, type KafkaConfig, logLevel } from 'kafkajs';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { KafkaOffsetsByTime, kafkaConfigOf, type OffsetsAdmin } from '../../shared/kafka/kafkajs-offsets.ts';
import { type OffsetsByTime, parseTimestamp } from '../../shared/kafka/offsets-by-time.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { planReplayAtTimes, replayStatus } from '../../shared/replay/replay.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { eos as run } from '../support/eos.ts';
import {
  append,
  isoAt as at,
  TIME_BASE as BASE,
  eventOf,
  kafkajsAdminOver,
  logOf,
  secondsIn as s,
} from '../support/timed-log.ts';

/** A fake admin per bootstrap list (`host:port,…`): the CLI's connectOffsetsByTime gets it instead of kafkajs's. */
interface FakeAdmin extends OffsetsAdmin {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
}
const fakes = vi.hoisted(() => new Map<string, () => unknown>());
vi.mock('kafkajs', async (importOriginal) => {
  const actual = await importOriginal<typeof import('kafkajs')>();
  class FakeableKafka {
    constructor(config: KafkaConfig) {
      const brokers = Array.isArray(config.brokers) ? config.brokers.join(',') : '';
      const fake = fakes.get(brokers);
      // biome-ignore lint/correctness/noConstructorReturn: a fake admin for registered brokers only
      return fake === undefined ? new actual.Kafka(config) : { admin: fake };
    }
  }
  // kafkajs is CommonJS: its errors (`...errors` in its exports) are on the default export only.
  const all = { ...(actual as unknown as { default: object }).default, ...actual, Kafka: FakeableKafka };
  return { ...all, default: all };
});

// kafkajs's own error classes (as its retrier and brokers throw them).
const {
  KafkaJSConnectionError,
  KafkaJSNumberOfRetriesExceeded,
  KafkaJSProtocolError,
  KafkaJSSASLAuthenticationError,
} = kafkajs;

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rvrt2');
});

const orders = builtinTransform('orders');

const live = (settings: Settings) => createProcessor({ settings, clients: res.clients, transform: orders });

const target = (settings: Settings) => ({
  clients: res.clients,
  table: settings.ledgerTable,
  pipeline: settings.pipelineId,
});

/** `eos` asking `offsetsByTime` (when given) for offsets at a time. */
function eos(args: readonly string[], offsetsByTime?: OffsetsByTime) {
  return run(args, offsetsByTime === undefined ? {} : { offsetsByTime });
}

/** A port on this host that nothing listens on. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

let fakeCount = 0;
/** Registers a fake admin for a fresh bootstrap list and returns the list, with counters of its (dis)connects. */
function fakeBrokers(admin: OffsetsAdmin): {
  servers: string;
  calls: { connect: number; disconnect: number };
} {
  const servers = `fake-broker-${process.pid}-${++fakeCount}.invalid:9092`;
  const calls = { connect: 0, disconnect: 0 };
  const fake: FakeAdmin = {
    ...admin,
    connect: async () => {
      calls.connect++;
    },
    disconnect: async () => {
      calls.disconnect++;
    },
  };
  fakes.set(servers, () => fake);
  return { servers, calls };
}

const protocolError = (type: string, code: number, retriable: boolean, message: string) =>
  new KafkaJSProtocolError({ message, type, code, retriable } as unknown as Error);

describe.concurrent('eos replay --from-timestamp: lookups racing appends, brokers failing', {
  timeout: 150_000,
}, () => {
  // Interleaving (KafkaOffsetsByTime.offsetsForTimes for --from-timestamp T, partition 1 holding no record at or
  // after T):
  //   1. fetchTopicOffsetsByTimestamp(T): kafkajs reads partition 1's high watermark (4), ListOffsets(T) finds no
  //      record, kafkajs answers 4 (its "none");
  //   2. a producer appends offset 4 to partition 1 stamped BEFORE T (CreateTime of a delayed/retried send, or any T
  //      in the future); the live pipeline stages it;
  //   3. fetchTopicOffsets: partition 1's end is now 5, and the adapter takes 4 < 5 for "a record is at 4": found.
  // planReplayAtTimes then plans partition 1 from 4 (to what is staged: 4) instead of skipping it ("holds no record at
  // or after T"), and the replay rewrites a record older than --from-timestamp that no ListOffsets(T) would ever have
  // answered. The port's comment calls this harmless ("newer than the lookup"), but newer by append is not newer by
  // timestamp, and the plan selects by timestamp. Guard: since --to-timestamp no longer depends on `found`,
  // read the ends BEFORE the lookup again: an answer below them is a record that existed and is at/after T (kafkajs's
  // substitute is read after them, so it is never below); an answer at or past them is "none at the lookup" (a record
  // appended meanwhile is produced while the command runs, outside the plan either way). Or confirm a found answer in
  // [end before, end after) with a second ListOffsets(T): only a real record at/after T gives the same offset again.
  it('a record stamped before --from-timestamp, appended between the adapter’s lookup and its read of the ends, leaves a partition with no record at/after T out of the plan', async () => {
    const log = logOf([
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
      [0, 1, 2, 3],
    ]);
    const settings = settingsIn(res, 'rvrt2');
    await live(settings).processEvent(eventOf(log));
    const adapter = new KafkaOffsetsByTime(
      kafkajsAdminOver(log, {
        afterLookup: async (timestamp) => {
          if (timestamp !== s(5) || log.endOffset(1) > 4) return;
          append(log, 1, 4); // stamped 4 s: before --from-timestamp
          await live(settings).processEvent(eventOf(log, (p, o) => p === 1 && o === 4));
        },
      }),
    );
    const planned = await planReplayAtTimes({
      ...target(settings),
      topic: 'orders',
      offsetsByTime: adapter,
      times: { from: s(5) },
      clock: systemClock,
    });
    expect(log.entries(1).every((e) => e.record.timestamp < s(5))).toBe(true);
    expect({ ranges: planned.plan.ranges, skipped: planned.skipped }).toEqual({
      ranges: [{ lane: 'orders', partition: 0, from: 5, to: 9 }],
      skipped: [{ partition: 1, reason: `it holds no record at or after ${at(5)}` }],
    });
  });

  // kafkajs 2.2.4 (node_modules/kafkajs/src/retry/index.js, errors.js) wraps the last failure of its retries in
  // KafkaJSNumberOfRetriesExceeded as `cause`; no kafkajs error has an `originalError` (grep finds none). The
  // adapter's brokersUnavailable walks `originalError` only, so the wrapper hides the KafkaJSConnectionError: a lookup
  // whose brokers went away after `connect()` (every connection closed: the broker pool reconnects to the seed list
  // through its retrier, as an unconnected admin does here, on a real kafkajs over a closed port) is an
  // OffsetsByTimeError, exit 2 "bad usage; nothing ran", not 3 as the docs promise. The same holds for
  // every retried failure (LEADER_NOT_AVAILABLE during an election, request timeouts of the metadata refresh).
  // Guard: walk `cause` too (`e = e.originalError ?? e.cause`), keeping UNKNOWN_TOPIC_OR_PARTITION exit 2
  // (test below); consider treating any exhausted retriable kafkajs error as unavailable.
  it('brokers gone after the connection (real kafkajs: KafkaJSNumberOfRetriesExceeded with the KafkaJSConnectionError as cause) exit 3, not 2', async () => {
    const port = await closedPort();
    const config = kafkaConfigOf({
      bootstrapServers: [`127.0.0.1:${port}`],
      auth: 'plaintext',
      env: {},
    });
    const admin = new Kafka({
      ...config,
      connectionTimeout: 1000,
      retry: { retries: 1, initialRetryTime: 50 },
      logLevel: logLevel.NOTHING,
    }).admin();
    const adapter = new KafkaOffsetsByTime(admin);
    const failure = await adapter.offsetsForTimes('orders', s(1)).catch((e: unknown) => e as Error);
    // What kafkajs threw: the wrapper, its cause the connection error.
    const cause = (failure as Error & { cause?: Error & { cause?: Error } }).cause;
    expect(cause?.name).toBe('KafkaJSNumberOfRetriesExceeded');
    expect(cause?.cause?.name).toBe('KafkaJSConnectionError');
    const result = await eos(
      [
        'replay',
        '--table',
        res.table,
        '--pipeline',
        'rvrt2-gone',
        '--topic',
        'orders',
        '--from-timestamp',
        at(1),
      ],
      adapter,
    );
    expect(result.err).toMatch(/ECONNREFUSED|Connection error/);
    expect(result.code).toBe(3);
  });

  // V8's Date.parse rolls a day past the month's end over into the next month ("2026-02-30" is 2 March, "2026-04-31"
  // 1 May, 2026-02-29 in a non-leap year 1 March): parseTimestamp's regex lets any two digits through and checks only
  // that the result is a Date, so a day that does not exist is silently another one, and the plan covers a range the
  // operator did not write (docs: ISO 8601, else "is not a time"). Guard: after Date.parse, check that the
  // date's calendar fields (in the zone given) read back as written, e.g. compare `new Date(ms + offsetMs)
  // .toISOString().slice(0, 10)` with the text's date, or refuse a day above the month's length.
  it('a day that does not exist (2026-02-30, 2026-04-31, 2026-02-29) is refused, not read as a day of the next month', async () => {
    for (const text of ['2026-02-30', '2026-04-31', '2026-02-29T12:00:00Z', '2026-02-31T09:00:00+09:00']) {
      expect(() => parseTimestamp(text), text).toThrow(/is not a time/);
    }
  });

  it('parseTimestamp edge cases: lowercase z and t are UTC, +24:00 and leap seconds refused, T24:00 is the next midnight, sub-ms digits dropped, 16-digit epochs up to what a Date holds, whitespace around trimmed', () => {
    expect(parseTimestamp('2026-11-24t00:00:00z')).toBe(BASE);
    expect(parseTimestamp('  2026-11-24T09:00:00+09:00\n')).toBe(BASE);
    expect(parseTimestamp('2026-11-24T00:00:00-00:00')).toBe(BASE);
    expect(parseTimestamp('2026-11-23T24:00:00Z')).toBe(BASE);
    expect(parseTimestamp('2026-11-24T00:00:00.999999999Z')).toBe(BASE + 999);
    expect(parseTimestamp('0000000000000001')).toBe(1);
    expect(parseTimestamp('8640000000000000')).toBe(8_640_000_000_000_000);
    for (const text of [
      '2026-11-24T00:00:00+24:00',
      '2026-11-24T00:00:00+12:60',
      '2016-12-31T23:59:60Z',
      '2026-11-24T24:00:01Z',
      '8640000000000001',
      '99999999999999999',
      '2026-11-24 00:00:00Z',
      '1969-12-31T23:59:59Z',
      '-1',
      '1.5e12',
      '2026-11-24T00:00:00+0900',
    ]) {
      expect(() => parseTimestamp(text), text).toThrow(/is not a time/);
    }
  });

  it('a record appended between the adapter’s two calls never enters a --to-timestamp range, whether stamped before or after T2 (the range ends at the lookup’s end)', async () => {
    for (const stamp of [9.5, 12]) {
      const log = logOf([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]]);
      const settings = settingsIn(res, 'rvrt2');
      await live(settings).processEvent(eventOf(log));
      const adapter = new KafkaOffsetsByTime(
        kafkajsAdminOver(log, {
          afterLookup: async (timestamp) => {
            if (timestamp !== s(10) || log.endOffset(0) > 10) return;
            append(log, 0, stamp);
            await live(settings).processEvent(eventOf(log, (_, o) => o === 10));
          },
        }),
      );
      const { plan } = await planReplayAtTimes({
        ...target(settings),
        topic: 'orders',
        offsetsByTime: adapter,
        times: { from: s(2), to: s(10) },
        clock: systemClock,
      });
      expect(plan.ranges, `stamped ${stamp} s`).toEqual([{ lane: 'orders', partition: 0, from: 2, to: 9 }]);
    }
  });

  it('a T2 answer below the T answer (the T lookup saw a record appended after the T2 lookup) skips the partition with its reason, and a partition in the T answer but not the T2 answer is refused with exit 2, nothing planned', async () => {
    const log = logOf([
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    ]);
    const settings = settingsIn(res, 'rvrt2');
    await live(settings).processEvent(eventOf(log));
    // T2 = 20 s answers the end (10) first; then offset 10 (stamped 15 s) is appended and staged; T = 12 s finds it.
    const port: OffsetsByTime = {
      offsetsForTimes: async (topic, timestamp) => {
        if (timestamp === s(12)) {
          while (log.endOffset(0) === 10) await new Promise((r) => setTimeout(r, 5));
        }
        const answer = await log.offsetsForTimes(topic, timestamp);
        if (timestamp === s(20)) {
          append(log, 0, 15);
          await live(settings).processEvent(eventOf(log, (p, o) => p === 0 && o === 10));
        }
        return answer;
      },
    };
    const planned = planReplayAtTimes({
      ...target(settings),
      topic: 'orders',
      offsetsByTime: port,
      times: { from: s(12), to: s(20) },
      clock: systemClock,
    });
    // Partition 0 is the only one with a record at or after 12 s; its range 10..9 is empty: nothing to replay.
    await expect(planned).rejects.toThrow(/the range ends at offset 9, before its start 10/);

    // Partition 1 in the answer for T, missing from the answer for T2.
    const lopsided: OffsetsByTime = {
      offsetsForTimes: async (topic, timestamp) => {
        const answer = new Map(await log.offsetsForTimes(topic, timestamp));
        if (timestamp === s(8)) answer.delete(1);
        return answer;
      },
    };
    const result = await eos(
      [
        ...['replay', '--table', res.table, '--pipeline', settings.pipelineId, '--topic', 'orders'],
        ...['--from-timestamp', at(2), '--to-timestamp', at(8)],
      ],
      lopsided,
    );
    expect(result.code).toBe(2);
    expect(result.err).toMatch(/the brokers gave no offset of orders-1 at/);
    expect(await replayStatus(target(settings))).toEqual([]);
  });

  it('UNKNOWN_TOPIC_OR_PARTITION, as kafkajs throws it after its retries, stays exit 2 (bad input), and a SASL failure or topic authorization failure after connecting exits 3', async () => {
    const args = (pipeline: string) => [
      ...['replay', '--table', res.table, '--pipeline', pipeline, '--topic', 'orders'],
      ...['--from-timestamp', at(1)],
    ];
    const failing = (error: Error): OffsetsByTime =>
      new KafkaOffsetsByTime({
        fetchTopicOffsets: async () => [],
        fetchTopicOffsetsByTimestamp: async () => {
          throw error;
        },
      });
    const unknown = new KafkaJSNumberOfRetriesExceeded(
      protocolError('UNKNOWN_TOPIC_OR_PARTITION', 3, true, 'This server does not host this topic-partition'),
      { retryCount: 2, retryTime: 300 },
    );
    const unknownResult = await eos(args('rvrt2-unknown'), failing(unknown));
    expect({ code: unknownResult.code, err: unknownResult.err }).toMatchObject({
      code: 2,
      err: expect.stringMatching(/does not host this topic-partition/),
    });
    const sasl = new (KafkaJSSASLAuthenticationError as unknown as new (message: string) => Error)(
      'SASL OAUTHBEARER authentication failed: Access denied',
    );
    expect((await eos(args('rvrt2-sasl'), failing(sasl))).code).toBe(3);
    const denied = protocolError('TOPIC_AUTHORIZATION_FAILED', 29, false, 'Not authorized to access topics');
    expect((await eos(args('rvrt2-denied'), failing(denied))).code).toBe(3);
  });

  it('through --bootstrap-servers: a connection lost during one lookup exits 3, disconnects once, and the other lookup failing later is no unhandled rejection', async () => {
    const settings = settingsIn(res, 'rvrt2');
    const log = logOf([[0, 1, 2, 3, 4, 5]]);
    await live(settings).processEvent(eventOf(log));
    let lateRejection: Promise<unknown> | undefined;
    const { servers, calls } = fakeBrokers({
      fetchTopicOffsets: async () =>
        Array.from({ length: log.partitions }, (_, partition) => {
          const end = String(log.endOffset(partition));
          return { partition, offset: end, high: end, low: '0' };
        }),
      fetchTopicOffsetsByTimestamp: async (_topic, timestamp) => {
        if (timestamp === s(4)) {
          // The T2 lookup: fails only after the command has given up and disconnected.
          lateRejection = (async () => {
            while (calls.disconnect === 0) await new Promise((r) => setTimeout(r, 5));
            throw new KafkaJSConnectionError('Connection error: socket closed', { broker: 'b-1:9098' });
          })();
          return lateRejection as Promise<never>;
        }
        // The T lookup: the connection is lost while it runs.
        throw new KafkaJSConnectionError('Connection error: read ECONNRESET', {
          broker: 'b-1:9098',
          code: 'ECONNRESET',
        });
      },
    });
    const result = await eos([
      ...['replay', '--table', res.table, '--pipeline', settings.pipelineId, '--topic', 'orders'],
      ...['--from-timestamp', at(1), '--to-timestamp', at(4)],
      ...['--bootstrap-servers', servers, '--kafka-auth', 'plaintext'],
    ]);
    expect({ code: result.code, calls }).toEqual({ code: 3, calls: { connect: 1, disconnect: 1 } });
    expect(result.err).toMatch(/ECONNRESET/);
    await expect(lateRejection).rejects.toThrow(/socket closed/);
    // Give an unhandled rejection the chance to surface (vitest fails the run on one).
    await new Promise((r) => setTimeout(r, 50));
    expect(await replayStatus(target(settings))).toEqual([]);
  });

  it('through --bootstrap-servers with --json: the plan printed as JSON with the asked times and the offsets the brokers gave, disconnected once', async () => {
    const settings = settingsIn(res, 'rvrt2');
    const log = logOf([
      [0, 1, 2, 3, 4, 5, 6, 7],
      [0, 1],
    ]);
    await live(settings).processEvent(eventOf(log));
    const { servers, calls } = fakeBrokers(kafkajsAdminOver(log));
    const result = await eos([
      ...['replay', '--table', res.table, '--pipeline', settings.pipelineId, '--topic', 'orders'],
      ...['--from-timestamp', at(2), '--to-timestamp', at(5)],
      ...['--bootstrap-servers', servers, '--kafka-auth', 'plaintext', '--json'],
    ]);
    expect({ code: result.code, err: result.err, calls }).toEqual({
      code: 0,
      err: '',
      calls: { connect: 1, disconnect: 1 },
    });
    const printed = JSON.parse(result.out) as {
      kind: string;
      planned: { plan: { generation: number; ranges: unknown; times: unknown }; skipped: unknown };
    };
    expect(printed.kind).toBe('planned');
    expect(printed.planned.plan).toMatchObject({
      generation: 1,
      ranges: [{ lane: 'orders', partition: 0, from: 2, to: 4 }],
      times: { from: s(2), to: s(5) },
    });
    expect(printed.planned.skipped).toEqual([
      { partition: 1, reason: `it holds no record at or after ${at(2)}` },
    ]);
  });
});
