/**
 * `eos replay --from-timestamp`: a time turned into per-partition offsets by the brokers' ListOffsets by
 * time, then planned and switched like any offset plan. The end-to-end tests ask the local runner's emulated log
 * (a real local part); the kafkajs adapter is exercised against a stub of kafkajs's admin API and the MSK bootstrap
 * lookup against a mocked Kafka client, since no broker and no MSK can run here.
 */
import { GetBootstrapBrokersCommand, KafkaClient } from '@aws-sdk/client-kafka';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { PartitionedLog } from '../../local/kafka-log.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import {
  bootstrapServersFor,
  clusterBootstrapServers,
  KafkaOffsetsByTime,
  kafkaConfigOf,
  type OffsetsAdmin,
} from '../../shared/kafka/kafkajs-offsets.ts';
import {
  BrokersUnavailableError,
  OffsetsByTimeError,
  parseTimestamp,
} from '../../shared/kafka/offsets-by-time.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { eos as run } from '../support/eos.ts';
import { order } from '../support/msk.ts';
import { isoAt as at, TIME_BASE as BASE, eventOf } from '../support/timed-log.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('replayts');
});

/**
 * Topic `orders`, 2 partitions of 12 records. Partition 0: record i at BASE + i s, except offset 7, produced late with
 * an old timestamp (BASE + 2 s); partition 1: record i at BASE + i s - 0.5 s.
 */
function topicLog(): PartitionedLog {
  const log = new PartitionedLog('orders', 2, new ManualClock(BASE));
  for (const partition of [0, 1]) {
    for (let i = 0; i < 12; i++) {
      const timestamp = partition === 0 ? BASE + (i === 7 ? 2 : i) * 1000 : BASE + i * 1000 - 500;
      log.append(partition, {
        key: `p${partition}-o${i}`,
        value: order(`p${partition}-o${i}`, `cust-${i % 3}`, `${i}.25`),
        headers: { 'idempotency-key': `p${partition}-o${i}` },
        timestamp,
      });
    }
  }
  return log;
}

/** `eos` asking the emulated log (when given) for offsets at a time. */
function eos(args: readonly string[], offsetsByTime?: PartitionedLog) {
  return run(args, offsetsByTime === undefined ? {} : { offsetsByTime });
}

async function checkpoint(settings: Settings): Promise<void> {
  expect((await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint()).status).toBe(
    'committed',
  );
}

describe('offsets at a time', () => {
  it('the emulated log gives the earliest offset at or after the time, per partition, as ListOffsets does', async () => {
    const log = topicLog();
    expect(await log.offsetsForTimes('orders', BASE + 5000)).toEqual(
      new Map([
        [0, { offset: 5, found: true }],
        [1, { offset: 6, found: true }],
      ]),
    );
    // Offset 7 of partition 0 is older than offset 6: the earliest offset at or after 2 s is still 2.
    expect((await log.offsetsForTimes('orders', BASE + 2000)).get(0)).toEqual({ offset: 2, found: true });
    // After every record: the partition's end, where a range until that time ends.
    expect(await log.offsetsForTimes('orders', BASE + 11_600)).toEqual(
      new Map([
        [0, { offset: 12, found: false }],
        [1, { offset: 12, found: false }],
      ]),
    );
    await expect(log.offsetsForTimes('payments', BASE)).rejects.toThrow(OffsetsByTimeError);
  });

  it('reads a time with a zone, a date or epoch ms, and refuses a time without a zone', () => {
    expect(parseTimestamp('2026-11-24T00:00:05Z')).toBe(BASE + 5000);
    expect(parseTimestamp('2026-11-24T09:00:05+09:00')).toBe(BASE + 5000);
    expect(parseTimestamp('2026-11-24T00:00:05.250Z')).toBe(BASE + 5250);
    expect(parseTimestamp('2026-11-24')).toBe(BASE);
    expect(parseTimestamp(String(BASE))).toBe(BASE);
    expect(parseTimestamp('8640000000000000')).toBe(8_640_000_000_000_000);
    for (const bad of [
      '2026-11-24T00:00:05',
      'yesterday',
      '',
      '2026-13-40T00:00:00Z',
      '-5',
      '8640000000000001',
      '9999999999999999',
    ]) {
      expect(() => parseTimestamp(bad), bad).toThrow(OffsetsByTimeError);
    }
  });

  it('kafkajs: an answer at the partition end (a time after every record) is no offset (stubbed admin: no broker here)', async () => {
    const calls: string[] = [];
    const admin: OffsetsAdmin = {
      fetchTopicOffsets: async (topic) => {
        calls.push(`ends ${topic}`);
        return [
          { partition: 0, offset: '12', high: '12', low: '0' },
          { partition: 1, offset: '12', high: '12', low: '3' },
          { partition: 2, offset: '0', high: '0', low: '0' },
        ];
      },
      fetchTopicOffsetsByTimestamp: async (topic, timestamp) => {
        calls.push(`at ${topic} ${timestamp}`);
        return [
          { partition: 0, offset: '5' },
          { partition: 1, offset: '12' },
          { partition: 2, offset: '-1' },
        ];
      },
    };
    expect(await new KafkaOffsetsByTime(admin).offsetsForTimes('orders', BASE)).toEqual(
      new Map([
        [0, { offset: 5, found: true }],
        [1, { offset: 12, found: false }],
        [2, { offset: 0, found: false }],
      ]),
    );
    // The ends before the lookup: an answer below them was there before the lookup began (kafkajs's stand-in for
    // "none" is read inside the lookup, so never below them).
    expect(calls).toEqual(['ends orders', `at orders ${BASE}`]);

    const failing: OffsetsAdmin = {
      ...admin,
      fetchTopicOffsets: async () => {
        throw new Error('This server does not host this topic-partition');
      },
    };
    const unknown = new KafkaOffsetsByTime(failing).offsetsForTimes('nope', BASE);
    await expect(unknown).rejects.toThrow(
      /the brokers could not give nope's offsets at 2026-11-24T00:00:00.000Z: This server does not host/,
    );
    await expect(unknown).rejects.not.toBeInstanceOf(BrokersUnavailableError);
    // Refused (not authorized), or gone after the connection: the brokers cannot be used, not bad input.
    for (const refusal of [
      Object.assign(new Error('Not authorized to access topics'), {
        name: 'KafkaJSProtocolError',
        type: 'TOPIC_AUTHORIZATION_FAILED',
      }),
      Object.assign(new Error('retries exceeded'), {
        name: 'KafkaJSNumberOfRetriesExceeded',
        originalError: Object.assign(new Error('Connection timeout'), { name: 'KafkaJSConnectionError' }),
      }),
    ]) {
      const refusing: OffsetsAdmin = {
        ...admin,
        fetchTopicOffsetsByTimestamp: async () => {
          throw refusal;
        },
      };
      await expect(new KafkaOffsetsByTime(refusing).offsetsForTimes('orders', BASE)).rejects.toBeInstanceOf(
        BrokersUnavailableError,
      );
    }
    const garbled: OffsetsAdmin = {
      ...admin,
      fetchTopicOffsetsByTimestamp: async () => [{ partition: 9, offset: '1' }],
    };
    await expect(new KafkaOffsetsByTime(garbled).offsetsForTimes('orders', BASE)).rejects.toThrow(
      /answered orders-9 with offset 1/,
    );
  });

  it('connects as the mapping does: IAM through OAUTHBEARER and TLS, SCRAM from the environment only', async () => {
    const iam = kafkaConfigOf({ bootstrapServers: ['b-1:9098'], auth: 'iam', region: 'eu-west-1', env: {} });
    expect(iam).toMatchObject({ brokers: ['b-1:9098'], ssl: true, sasl: { mechanism: 'oauthbearer' } });
    expect(() => kafkaConfigOf({ bootstrapServers: ['b-1:9098'], auth: 'iam', env: {} })).toThrow(
      /needs the cluster region/,
    );
    expect(() =>
      kafkaConfigOf({
        bootstrapServers: ['b-1:9096'],
        auth: 'scram-sha-512',
        env: { EOS_KAFKA_USERNAME: 'u' },
      }),
    ).toThrow(/EOS_KAFKA_USERNAME and EOS_KAFKA_PASSWORD/);
    expect(
      kafkaConfigOf({
        bootstrapServers: ['b-1:9096'],
        auth: 'scram-sha-256',
        env: { EOS_KAFKA_USERNAME: 'u', EOS_KAFKA_PASSWORD: 'p' },
      }),
    ).toMatchObject({ ssl: true, sasl: { mechanism: 'scram-sha-256', username: 'u', password: 'p' } });
    expect(kafkaConfigOf({ bootstrapServers: ['localhost:9092'], auth: 'plaintext', env: {} }).ssl).toBe(
      undefined,
    );

    const brokers = {
      BootstrapBrokerStringSaslIam: 'b-1:9098,b-2:9098',
      BootstrapBrokerStringPublicSaslIam: 'b-1-public:9198',
      BootstrapBrokerStringTls: 'b-1:9094',
    };
    expect(bootstrapServersFor(brokers, 'iam')).toEqual(['b-1:9098', 'b-2:9098']);
    expect(bootstrapServersFor({ BootstrapBrokerStringPublicSaslIam: 'p:9198' }, 'iam')).toEqual(['p:9198']);
    expect(() => bootstrapServersFor(brokers, 'scram-sha-512')).toThrow(
      /no bootstrap brokers for --kafka-auth/,
    );

    // Mocked: no MSK here.
    const kafka = mockClient(KafkaClient);
    kafka
      .on(GetBootstrapBrokersCommand, { ClusterArn: 'arn:aws:kafka:eu-west-1:1:cluster/c/u' })
      .resolves(brokers);
    expect(
      await clusterBootstrapServers(new KafkaClient({}), 'arn:aws:kafka:eu-west-1:1:cluster/c/u', 'tls'),
    ).toEqual(['b-1:9094']);
    kafka.on(GetBootstrapBrokersCommand).rejects(new Error('Cluster not found'));
    await expect(
      clusterBootstrapServers(new KafkaClient({}), 'arn:aws:kafka:eu-west-1:1:cluster/x/u', 'iam'),
    ).rejects.toThrow(/cannot read the bootstrap brokers of .*: Cluster not found/);
    kafka.restore();
  });
});

describe('eos replay --from-timestamp', () => {
  it('plans the offsets at the times, switches readers to them, and a second run plans nothing new', async () => {
    const log = topicLog();
    const settings = settingsIn(res, 'replayts');
    await createProcessor({ settings, clients: res.clients }).processEvent(eventOf(log));
    await checkpoint(settings);
    const base = ['replay', '--table', res.table, '--pipeline', settings.pipelineId];

    const args = [...base, '--topic', 'orders', '--from-timestamp', at(5), '--to-timestamp', at(9)];
    const planned = await eos(args, log);
    expect(planned.code).toBe(0);
    // Partition 0: from offset 5 (5 s) to 8 (offset 9 is the first at or after 9 s; offset 7, older, is inside).
    // Partition 1: from offset 6 (5.5 s) to 9 (offset 10 is the first at or after 9 s).
    expect(planned.out).toMatch(
      new RegExp(
        `^generation 1 planned: 2 partitions, records from ${at(5)} until ${at(9)}\\n {2}orders-0: offsets 5\\.\\.8\\n {2}orders-1: offsets 6\\.\\.9\\n`,
      ),
    );
    const again = await eos(args, log);
    expect(again.out).toMatch(/^generation 1 was planned already with these ranges/);

    const status = await eos(base, log);
    expect(status.out).toMatch(
      new RegExp(`^generation 1 \\(planned .*, records from ${at(5)} until ${at(9)}\\): staging`, 'm'),
    );
    expect((await eos([...base, '--switch', '1'], log)).out).toMatch(/^generation 1: switch requested/);
    await createProcessor({
      settings: { ...settings, replayGeneration: 1 },
      clients: res.clients,
    }).processEvent(eventOf(log));
    await checkpoint(settings);
    const done = JSON.parse((await eos([...base, '--json'])).out) as {
      replays: Array<{
        phase: string;
        ranges: Array<{ partition: number; from: number; to: number; committedOffset: number }>;
      }>;
    };
    expect(done.replays[0]!.phase).toBe('switched');
    expect(done.replays[0]!.ranges.map(({ partition, from, to }) => ({ partition, from, to }))).toEqual([
      { partition: 0, from: 5, to: 8 },
      { partition: 1, from: 6, to: 9 },
    ]);
    // Each range committed through its end (the first record after it moved the lane's fence past it).
    for (const range of done.replays[0]!.ranges)
      expect(range.committedOffset).toBeGreaterThanOrEqual(range.to);

    // From a time only partition 0 reaches: partition 1 is skipped, with the reason.
    const late = await eos([...base, '--topic', 'orders', '--from-timestamp', at(11)], log);
    expect(late.code).toBe(0);
    expect(late.out).toMatch(
      /^generation 2 planned: 1 partitions, records from .* on\n {2}orders-0: offsets 11\.\.11\n/,
    );
    expect(late.out).toMatch(/partition 1 skipped: it holds no record at or after 2026-11-24T00:00:11.000Z/);
  });

  it('refuses what cannot be planned by time, with the reason', async () => {
    const log = topicLog();
    const base = ['replay', '--table', res.table, '--pipeline', 'replayts-none', '--topic', 'orders'];
    expect(await eos([...base, '--from-timestamp', '2026-11-24T00:00:05'], log)).toMatchObject({
      code: 2,
      err: expect.stringMatching(/--from-timestamp.*not a time: give ISO 8601 with a zone/),
    });
    expect(await eos([...base, '--from-offset', '1', '--to-timestamp', at(9)], log)).toMatchObject({
      code: 2,
      err: expect.stringMatching(/--to-timestamp goes with --from-timestamp only/),
    });
    expect(await eos([...base, '--from-timestamp', at(5), '--to-offset', '9'], log)).toMatchObject({
      code: 2,
      err: expect.stringMatching(/ends with --to-timestamp, not --to-offset/),
    });
    expect(await eos([...base, '--from-timestamp', at(5), '--to-timestamp', at(5)], log)).toMatchObject({
      code: 2,
      err: expect.stringMatching(/--to-timestamp must be after --from-timestamp/),
    });
    expect(await eos([...base, '--from-timestamp', at(5), '--from-offset', '3'], log)).toMatchObject({
      code: 2,
      err: expect.stringMatching(/one of --from-offset, --from-offsets, --from-timestamp/),
    });
    expect(await eos([...base, '--from-timestamp', at(30)], log)).toMatchObject({
      code: 2,
      err: expect.stringMatching(
        /no partition of orders holds a record at or after 2026-11-24T00:00:30.000Z/,
      ),
    });
    expect(await eos([...base, '--from-timestamp', at(5), '--partitions', '4'], log)).toMatchObject({
      code: 2,
      err: expect.stringMatching(/topic orders has no partition 4/),
    });
    // The pipeline staged nothing of the topic: refused before anything is written.
    expect(await eos([...base, '--from-timestamp', at(5)], log)).toMatchObject({
      code: 2,
      err: expect.stringMatching(/has staged nothing of topic orders/),
    });
    // Without a log given, the brokers are asked: where, and how.
    expect(await eos([...base, '--from-timestamp', at(5)])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/give one of --cluster-arn, --bootstrap-servers/),
    });
    expect(
      await eos([
        ...base,
        '--from-timestamp',
        at(5),
        '--bootstrap-servers',
        'b:9096',
        '--kafka-auth',
        'scram-sha-512',
      ]),
    ).toMatchObject({ code: 2, err: expect.stringMatching(/EOS_KAFKA_USERNAME and EOS_KAFKA_PASSWORD/) });
    expect(
      await eos([
        ...base,
        '--from-timestamp',
        at(5),
        '--bootstrap-servers',
        '127.0.0.1:1',
        '--kafka-auth',
        'plaintext',
      ]),
    ).toMatchObject({
      code: 3,
      err: expect.stringMatching(/cannot connect to 127.0.0.1:1 \(--kafka-auth plaintext\)/),
    });
    // --cluster-arn reads the bootstrap brokers from MSK first (here an endpoint that does not answer).
    expect(
      await eos([
        ...base,
        '--from-timestamp',
        at(5),
        '--cluster-arn',
        'arn:aws:kafka:eu-west-1:123456789012:cluster/orders/0000',
        '--endpoint',
        'http://127.0.0.1:1',
      ]),
    ).toMatchObject({
      code: 3,
      err: expect.stringMatching(/^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: /),
    });
    expect(await eos([...base, '--from-timestamp', at(5), '--kafka-auth', 'kerberos'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/expected one of iam, scram-sha-512/),
    });
  });
});
