/**
 * Adversarial interleavings of `eos replay --from-timestamp [--to-timestamp]`: times turned into offset ranges by
 * ListOffsets by time (`shared/kafka/kafkajs-offsets.ts`, or the emulated log's `PartitionedLog.offsetsForTimes`),
 * then planned by `planReplay` (`planReplayAtTimes`, `shared/replay/replay.ts`). Each comment gives the
 * interleaving and what the code does about it.
 * Real DynamoDB Local and S3 server; the kafkajs adapter runs over a stub of kafkajs's admin API that behaves as
 * kafkajs 2.x does (`fetchTopicOffsetsByTimestamp` reads the high watermark first and answers it for a partition
 * where ListOffsets found no record), since no broker runs here.
 */
import { DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { kafkaOffsetsStatements } from '../../infra/kafka-cluster.ts';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { KafkaOffsetsByTime, type OffsetsAdmin } from '../../shared/kafka/kafkajs-offsets.ts';
import type { OffsetsByTime } from '../../shared/kafka/offsets-by-time.ts';
import { EpochLedger } from '../../shared/ledger/epoch-switch.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { planReplayAtTimes, replayStatus, requestSwitch } from '../../shared/replay/replay.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { eos as run } from '../support/eos.ts';
import {
  append,
  isoAt as at,
  eventOf,
  kafkajsAdminOver,
  logOf,
  secondsIn as s,
} from '../support/timed-log.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rvrt');
});

const orders = builtinTransform('orders');
/** The changed transform of the replay: every row says it was written by version 2. */
const ordersV2: Transform = {
  name: 'orders-v2',
  apply(record) {
    const result = orders.apply(record);
    if (result.kind !== 'ok') return result;
    return { ...result, rows: result.rows.map((row) => ({ ...row, version: 2 })) };
  },
};

const live = (settings: Settings) => createProcessor({ settings, clients: res.clients, transform: orders });
const replayer = (settings: Settings, generation: number) =>
  createProcessor({
    settings: { ...settings, replayGeneration: generation },
    clients: res.clients,
    transform: ordersV2,
  });

async function checkpoint(settings: Settings): Promise<string> {
  const outcome = await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint();
  expect(['committed', 'empty']).toContain(outcome.status);
  return outcome.status;
}

const target = (settings: Settings) => ({
  clients: res.clients,
  table: settings.ledgerTable,
  pipeline: settings.pipelineId,
});

/**
 * What readers show: per epoch lane and partition (`orders#0`, `orders~1#0`), offset → 'v1' or 'v2'; a record shown
 * twice fails the test.
 */
async function readerView(settings: Settings): Promise<Record<string, Record<number, string>>> {
  const view: Record<string, Record<number, string>> = {};
  for await (const { file, row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    const lane = `${file.topic.replace(/~g\d+$/, '')}#${file.partition}`;
    const offset = (row.source as { offset: number }).offset;
    view[lane] ??= {};
    expect(view[lane]![offset], `${lane}@${offset} shown twice`).toBeUndefined();
    view[lane]![offset] = row.version === 2 ? 'v2' : 'v1';
  }
  return view;
}

/** `{offset: version}` for offsets from..to-1, v2 where `replayed`. */
function versions(from: number, to: number, replayed: (offset: number) => boolean = () => false) {
  return Object.fromEntries(
    Array.from({ length: to - from }, (_, i) => [from + i, replayed(from + i) ? 'v2' : 'v1']),
  );
}

/** `eos` asking `offsetsByTime` (when given) for offsets at a time. */
function eos(args: readonly string[], offsetsByTime?: OffsetsByTime) {
  return run(args, offsetsByTime === undefined ? {} : { offsetsByTime });
}

describe.concurrent('eos replay --from-timestamp: time-planned ranges, the kafkajs adapter, out-of-range times', {
  timeout: 150_000,
}, () => {
  it('a time-planned generation replays exactly its ranges: non-monotonic timestamps, an empty T..T2 span, a start past the fence and a partition never staged are skipped, each record shown once', async () => {
    // Partition 0: offset i at i s, except offset 7 produced late with an old timestamp (2 s).
    // Partition 1: a record from the future at offset 3 (10 s): the offset at 5 s and at 9 s are both 3.
    // Partition 2: staged by the live pipeline only up to offset 3; the offset at 5 s is 5.
    // Partition 3: a partition the pipeline never staged (added to the topic later).
    const log = logOf([
      [0, 1, 2, 3, 4, 5, 6, 2, 8, 9, 10, 11],
      [0, 1, 2, 10, 3, 4, 5, 6, 7, 8, 11, 12],
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    ]);
    const settings = settingsIn(res, 'rvrt');
    await live(settings).processEvent(eventOf(log, (p, o) => p < 2 || (p === 2 && o <= 3)));
    await checkpoint(settings);
    const planned = await planReplayAtTimes({
      ...target(settings),
      topic: 'orders',
      offsetsByTime: log,
      times: { from: s(5), to: s(9) },
      clock: systemClock,
    });
    expect(planned.plan.ranges).toEqual([{ lane: 'orders', partition: 0, from: 5, to: 8 }]);
    expect(planned.plan.times).toEqual({ from: s(5), to: s(9) });
    expect(planned.skipped).toEqual([
      { partition: 1, reason: 'the range ends at offset 2, before its start 3' },
      { partition: 2, reason: 'its epoch 0 has staged up to offset 3, before 5' },
      { partition: 3, reason: 'the pipeline has staged nothing of it' },
    ]);

    // The replay mapping reads the whole topic from its start; the live pipeline goes on meanwhile.
    await replayer(settings, 1).processEvent(eventOf(log));
    await live(settings).processEvent(eventOf(log, (p, o) => p >= 2 && (p === 3 || o > 3)));
    await checkpoint(settings);
    const before = await readerView(settings);
    expect(before).toEqual({
      'orders#0': versions(0, 12),
      'orders#1': versions(0, 12),
      'orders#2': versions(0, 12),
      'orders#3': versions(0, 12),
    });
    expect(await requestSwitch(target(settings), 1, systemClock)).toBe('requested');
    await checkpoint(settings);
    expect((await replayStatus(target(settings)))[0]!.phase).toBe('switched');
    // Exactly offsets 5..8 of partition 0 (offset 7, older than 5 s, included) from the new generation; nothing else.
    expect(await readerView(settings)).toEqual({
      ...before,
      'orders#0': versions(0, 12, (o) => o >= 5 && o <= 8),
    });
  });

  it('a partition in a newer epoch is planned on its epoch lane with the recreated topic offsets, and the switch replaces only that lane', async () => {
    const old = logOf(
      [
        [0, 1, 2, 3, 4, 5],
        [0, 1, 2, 3, 4, 5],
      ],
      'old',
    );
    const settings = settingsIn(res, 'rvrt');
    await live(settings).processEvent(eventOf(old));
    // Partition 0 goes to epoch 1 (the topic recreated); its new records are later in time.
    const epochs = new EpochLedger(res.clients.dynamodb, res.table, settings.pipelineId, systemClock);
    expect((await epochs.startNew('orders', 0, { force: true })).kind).toBe('opened');
    const recreated = logOf(
      [
        [20, 21, 22, 23, 24],
        [6, 7, 8, 9],
      ],
      'new',
    );
    await live(settings).processEvent(eventOf(recreated, (p) => p === 0));
    await checkpoint(settings);
    const { plan, skipped } = await planReplayAtTimes({
      ...target(settings),
      topic: 'orders',
      offsetsByTime: recreated,
      times: { from: s(22) },
      clock: systemClock,
    });
    expect(plan.ranges).toEqual([{ lane: 'orders~1', partition: 0, from: 2, to: 4 }]);
    expect(skipped).toEqual([
      { partition: 1, reason: 'it holds no record at or after 2026-11-24T00:00:22.000Z' },
    ]);
    await replayer(settings, 1).processEvent(eventOf(recreated, (p) => p === 0));
    expect(await requestSwitch(target(settings), 1, systemClock)).toBe('requested');
    await checkpoint(settings);
    expect(await readerView(settings)).toEqual({
      'orders#0': versions(0, 6),
      'orders#1': versions(0, 6),
      'orders~1#0': versions(0, 5, (o) => o >= 2),
    });
  });

  it('running the same time plan again is idempotent while the range is fixed by --to-timestamp, even after the topic grew; without it the grown range is a new generation (as offset plans)', async () => {
    const log = logOf([[0, 1, 2, 3, 4, 5, 6, 7]]);
    const settings = settingsIn(res, 'rvrt');
    await live(settings).processEvent(eventOf(log));
    const args = ['replay', '--table', res.table, '--pipeline', settings.pipelineId, '--topic', 'orders'];
    const bounded = [...args, '--from-timestamp', at(2), '--to-timestamp', at(5)];
    expect((await eos(bounded, log)).out).toMatch(
      /^generation 1 planned: 1 partitions, .*\n {2}orders-0: offsets 2\.\.4\n/,
    );
    for (const t of [8, 9]) append(log, 0, t);
    await live(settings).processEvent(eventOf(log, (_, o) => o >= 8));
    expect((await eos(bounded, log)).out).toMatch(/^generation 1 was planned already with these ranges/);

    const open = [...args, '--from-timestamp', at(2)];
    expect((await eos(open, log)).out).toMatch(/^generation 2 planned: .*\n {2}orders-0: offsets 2\.\.9\n/);
    expect((await eos(open, log)).out).toMatch(/^generation 2 was planned already/);
    append(log, 0, 10);
    await live(settings).processEvent(eventOf(log, (_, o) => o >= 10));
    expect((await eos(open, log)).out).toMatch(/^generation 3 planned: .*\n {2}orders-0: offsets 2\.\.10\n/);
  });

  // Interleaving (T2 close to now, e.g. "until now"):
  //   1. ListOffsets(T2) finds no record at or after T2 in partition 0 (its newest record is older): the port answers
  //      undefined, and planReplayAtTimes drops the partition's end ("no end: up to what is staged");
  //   2. a producer appends records stamped at/after T2 and the live pipeline stages them;
  //   3. planReplay reads the fence and ends the range at the staged offset: the plan replays records at or after
  //      --to-timestamp, though the command says it stops before them ("records from … until T2").
  // Guard: a "no record at or after T2" answer must still bound the range by the partition's end at the lookup (kafkajs
  // answers the high watermark for it; the emulated log's end offset): `to = min(end at lookup - 1, staged)`.
  it('--to-timestamp with no record at or after it yet ends the range at the partition end of the lookup, not at the fence read later (records at/after T2 staged meanwhile are not replayed)', async () => {
    const log = logOf([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]]);
    const settings = settingsIn(res, 'rvrt');
    await live(settings).processEvent(eventOf(log));
    const port: OffsetsByTime = {
      offsetsForTimes: async (topic, timestamp) => {
        const answer = await log.offsetsForTimes(topic, timestamp);
        if (timestamp === s(10)) {
          for (const t of [10, 11]) append(log, 0, t);
          await live(settings).processEvent(eventOf(log, (_, o) => o >= 10));
        }
        return answer;
      },
    };
    const { plan } = await planReplayAtTimes({
      ...target(settings),
      topic: 'orders',
      offsetsByTime: port,
      times: { from: s(2), to: s(10) },
      clock: systemClock,
    });
    // Offsets 10 and 11 are stamped 10 s and 11 s: at or after --to-timestamp.
    expect(plan.ranges).toEqual([{ lane: 'orders', partition: 0, from: 2, to: 9 }]);
  });

  // Interleaving inside the kafkajs adapter (KafkaOffsetsByTime.offsetsForTimes for T2):
  //   1. fetchTopicOffsets: partition 0's high watermark is 10;
  //   2. a producer appends offset 10, stamped at T2; the live pipeline stages it;
  //   3. fetchTopicOffsetsByTimestamp(T2) answers offset 10: a real record at T2;
  //   4. the adapter takes 10 >= the end read in 1 as "no record at or after T2" (undefined), so the plan ends at the
  //      staged offset 10 and replays the record at T2.
  // Guard: an answer at or past the ends read before the lookup is "none" and the range stops at those ends (a
  // snapshot taken before the lookup), so the record appended meanwhile is not in it. (Reading the ends after the
  // lookup instead let an older record appended meanwhile look found: test/replay/timestamp-lookups.adversarial.test.ts.)
  it('kafkajs adapter: a record at T2 appended between the high-watermark read and ListOffsets ends the range before it', async () => {
    const log = logOf([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]]);
    const settings = settingsIn(res, 'rvrt');
    await live(settings).processEvent(eventOf(log));
    const adapter = new KafkaOffsetsByTime(
      kafkajsAdminOver(log, {
        beforeLookup: async (timestamp) => {
          if (timestamp !== s(10) || log.endOffset(0) > 10) return;
          append(log, 0, 10);
          await live(settings).processEvent(eventOf(log, (_, o) => o >= 10));
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
    expect(plan.ranges).toEqual([{ lane: 'orders', partition: 0, from: 2, to: 9 }]);
  });

  it('kafkajs adapter: -1 and the high watermark are "no record", an offset below it is one, a partition missing from the ends is refused', async () => {
    const log = logOf([
      [0, 1, 2, 3],
      [0, 1],
    ]);
    const adapter = new KafkaOffsetsByTime(kafkajsAdminOver(log));
    expect(await adapter.offsetsForTimes('orders', s(1))).toEqual(
      new Map([
        [0, { offset: 1, found: true }],
        [1, { offset: 1, found: true }],
      ]),
    );
    expect(await adapter.offsetsForTimes('orders', s(2))).toEqual(
      new Map([
        [0, { offset: 2, found: true }],
        [1, { offset: 2, found: false }],
      ]),
    );
    const raw: OffsetsAdmin = {
      fetchTopicOffsets: async () => [{ partition: 0, offset: '4', high: '4', low: '0' }],
      fetchTopicOffsetsByTimestamp: async () => [
        { partition: 0, offset: '-1' },
        { partition: 1, offset: '0' },
      ],
    };
    await expect(new KafkaOffsetsByTime(raw).offsetsForTimes('orders', s(1))).rejects.toThrow(
      /answered orders-1 with offset 0/,
    );
    const minusOne: OffsetsAdmin = {
      ...raw,
      fetchTopicOffsetsByTimestamp: async () => [{ partition: 0, offset: '-1' }],
    };
    expect(await new KafkaOffsetsByTime(minusOne).offsetsForTimes('orders', s(1))).toEqual(
      new Map([[0, { offset: 4, found: false }]]),
    );
  });

  // `parseTimestamp` takes up to 16 digits of epoch ms, and the plan item keeps any safe integer as a time, but a Date
  // holds only ±8.64e15 ms: `new Date(9e15).toISOString()` throws RangeError. `--to-timestamp 9000000000000000` (an
  // operator's "no end") finds no record at or after it, so the plan is written with times.to = 9e15; printing the
  // planned line then throws (exit 1, "unexpected"), and since a plan is never changed, every later `eos replay`
  // (status) throws the same way. Guard: refuse times past 8.64e15 in parseTimestamp (and planReplayAtTimes), and drop
  // them in timesFromItem (or format an out-of-range time as its number).
  it('--to-timestamp 9000000000000000 (past what a Date holds) is refused, and eos replay status still works', async () => {
    const log = logOf([[0, 1, 2, 3, 4, 5]]);
    const settings = settingsIn(res, 'rvrt');
    await live(settings).processEvent(eventOf(log));
    const base = ['replay', '--table', res.table, '--pipeline', settings.pipelineId];
    const planned = await eos(
      [...base, '--topic', 'orders', '--from-timestamp', at(2), '--to-timestamp', '9000000000000000'],
      log,
    );
    const status = await eos(base);
    expect({ planned: planned.code === 1, status: status.code, err: status.err }).toEqual({
      planned: false,
      status: 0,
      err: '',
    });
  });

  // Same root as above, through a plan item written by hand: timesFromItem keeps {from: 9e15} (a safe integer), and
  // formatStatus's iso() throws, so `eos replay` cannot show any plan of the pipeline any more.
  it('a hand-written plan whose times are out of Date range leaves them out, and eos replay status still works', async () => {
    const settings = settingsIn(res, 'rvrt');
    await putPlan(settings, 1, { from: 9_000_000_000_000_000 });
    const status = await eos(['replay', '--table', res.table, '--pipeline', settings.pipelineId]);
    expect({ code: status.code, err: status.err }).toEqual({ code: 0, err: '' });
  });

  it('plan items with malformed times (a string, null, a list, fractions, to without from) neither stop the coordinator and its switch nor eos replay status', async () => {
    const log = logOf([[0, 1, 2, 3, 4, 5]]);
    const settings = settingsIn(res, 'rvrt');
    await live(settings).processEvent(eventOf(log));
    const malformed: unknown[] = [
      'yesterday',
      null,
      [1, 2],
      { from: 1.5, to: 2 },
      { to: s(3) },
      { from: s(1), to: 'x' },
    ];
    for (const [i, times] of malformed.entries()) await putPlan(settings, i + 1, times);
    expect(await requestSwitch(target(settings), 6, systemClock)).toBe('requested');
    await replayer(settings, 6).processEvent(eventOf(log));
    expect(await checkpoint(settings)).toBe('committed');
    const status = await eos(['replay', '--table', res.table, '--pipeline', settings.pipelineId]);
    expect(status).toMatchObject({ code: 0, err: '' });
    expect(status.out).toMatch(
      /^generation 6 \(planned .*, records from 2026-11-24T00:00:01\.000Z on\): switched by checkpoint 1$/m,
    );
    expect(status.out).toMatch(/^generation 1 \(planned [^,]*\): staging/m);
    expect(await readerView(settings)).toEqual({ 'orders#0': versions(0, 6, (o) => o >= 1 && o <= 4) });
  });

  // The adapter wraps every kafkajs failure after connecting in OffsetsByTimeError, a PipelineError, which the CLI
  // reports as exit 2 ("bad usage or input; nothing ran"). A role without kafka-cluster:DescribeTopic (what
  // operatorRoles grants) gets TOPIC_AUTHORIZATION_FAILED on Metadata/ListOffsets: access denied, which the exit table
  // (cli/failures.ts) and connectBrokers (unreachable or refused credentials → 3) make exit 3. Guard: a subclass for
  // authorization and connection failures after connect (KafkaJSProtocolError type *_AUTHORIZATION_FAILED,
  // KafkaJSConnectionError, KafkaJSRequestTimeoutError) mapped to AwsUnavailableError as connectBrokers does.
  it('the brokers refusing the topic (TOPIC_AUTHORIZATION_FAILED) exits 3 (cannot be used), not 2 (bad usage)', async () => {
    const denied = Object.assign(new Error('Not authorized to access topics: [Topic authorization failed]'), {
      name: 'KafkaJSProtocolError',
      type: 'TOPIC_AUTHORIZATION_FAILED',
      code: 29,
      retriable: false,
    });
    const adapter = new KafkaOffsetsByTime({
      fetchTopicOffsets: async () => {
        throw denied;
      },
      fetchTopicOffsetsByTimestamp: async () => {
        throw denied;
      },
    });
    const result = await eos(
      [
        'replay',
        '--table',
        res.table,
        '--pipeline',
        'rvrt-denied',
        '--topic',
        'orders',
        '--from-timestamp',
        at(1),
      ],
      adapter,
    );
    expect(result.err).toMatch(/Not authorized to access topics/);
    expect(result.code).toBe(3);
  });

  it('refuses wrong input with exit 2 and says why, before anything is written', async () => {
    const log = logOf([
      [0, 1, 2, 3, 4, 5],
      [0, 1],
    ]);
    const settings = settingsIn(res, 'rvrt');
    await live(settings).processEvent(eventOf(log, (p) => p === 0));
    const base = ['replay', '--table', res.table, '--pipeline', settings.pipelineId];
    const plan = [...base, '--topic', 'orders'];
    const cases: Array<[string[], RegExp]> = [
      [
        [...plan, '--from-timestamp', at(1), '--from-offsets', '0=1'],
        /one of --from-offset, --from-offsets, --from-timestamp/,
      ],
      [[...base, '--to-timestamp', at(3)], /needs --topic and one of/],
      [
        [...plan, '--from-timestamp', at(3), '--to-timestamp', at(1)],
        /--to-timestamp must be after --from-timestamp/,
      ],
      [[...plan, '--from-timestamp', at(1), '--switch', '1'], /--switch does not go with/],
      [
        [...plan, '--from-offset', '1', '--cluster-arn', 'arn:aws:kafka:eu-west-1:1:cluster/c/u'],
        /--cluster-arn goes with --from-timestamp only/,
      ],
      [[...plan, '--from-timestamp', '2026-11-24T00:00'], /not a time/],
      [[...plan, '--from-timestamp', at(1), '--partitions', '1'], /has staged nothing of orders partition 1/],
      [[...plan, '--from-timestamp', at(1), '--partitions', '2'], /topic orders has no partition 2/],
      [
        [...plan, '--from-timestamp', at(3.5), '--to-timestamp', at(3.7)],
        /nothing of orders to replay .*the range ends at offset 3, before its start 4/,
      ],
      [
        [
          'replay',
          '--table',
          res.table,
          '--pipeline',
          settings.pipelineId,
          '--topic',
          'payments',
          '--from-timestamp',
          at(1),
        ],
        /the local log holds orders, not payments/,
      ],
    ];
    for (const [args, message] of cases) {
      const result = await eos(args, log);
      expect({ args: args.slice(4).join(' '), code: result.code }).toEqual({
        args: args.slice(4).join(' '),
        code: 2,
      });
      expect(result.err).toMatch(message);
    }
    // Nothing was planned by any of them.
    expect(await replayStatus(target(settings))).toEqual([]);
    // A partition the topic has but the pipeline never staged is skipped, not refused, when no --partitions is given.
    const ok = await eos([...plan, '--from-timestamp', at(1)], log);
    expect(ok.code).toBe(0);
    expect(ok.out).toMatch(
      /orders-0: offsets 1\.\.5\n {2}partition 1 skipped: the pipeline has staged nothing of it\n/,
    );
  });

  it('operatorRoles on MSK: bootstrap brokers on the cluster, Connect and DescribeTopic on the one topic under IAM; never ReadData, a group or a wildcard', () => {
    const cluster = 'arn:aws:kafka:eu-west-1:123456789012:cluster/orders/1111-2222';
    const iamStatements = kafkaOffsetsStatements(cluster, 'orders', true, 'X').map((st) =>
      st.toStatementJson(),
    );
    expect(iamStatements).toEqual([
      {
        Sid: 'OperateKafkaBootstrapX',
        Effect: 'Allow',
        Action: 'kafka:GetBootstrapBrokers',
        Resource: cluster,
      },
      { Sid: 'OperateKafkaConnectX', Effect: 'Allow', Action: 'kafka-cluster:Connect', Resource: cluster },
      {
        Sid: 'OperateKafkaOffsetsX',
        Effect: 'Allow',
        Action: 'kafka-cluster:DescribeTopic',
        Resource: 'arn:aws:kafka:eu-west-1:123456789012:topic/orders/1111-2222/orders',
      },
    ]);
    expect(JSON.stringify(iamStatements)).not.toMatch(/ReadData|Group|\*/);
    expect(kafkaOffsetsStatements(cluster, 'orders', false, 'X').map((st) => st.toStatementJson())).toEqual([
      iamStatements[0],
    ]);
  });
});

/** A plan item written by hand: generation `generation`, partition 0 offsets 1..4, the given `times`. */
async function putPlan(settings: Settings, generation: number, times: unknown): Promise<void> {
  const doc = DynamoDBDocumentClient.from(res.clients.dynamodb, {
    marshallOptions: { removeUndefinedValues: true },
  });
  await doc.send(
    new PutCommand({
      TableName: settings.ledgerTable,
      Item: {
        ...keys.replayPlan(settings.pipelineId, generation),
        generation,
        createdAt: s(100),
        ranges: [{ lane: 'orders', partition: 0, from: 1, to: 4 }],
        times,
      },
    }),
  );
}
