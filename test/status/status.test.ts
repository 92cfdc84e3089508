/**
 * `eos status` against DynamoDB Local (real), with only the Kafka control plane mocked: no MSK runs here.
 */
import { DescribeClusterV2Command, KafkaClient } from '@aws-sdk/client-kafka';
import { DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { Command } from 'commander';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { registerStatusCommand } from '../../cli/status.ts';
import { ManualClock } from '../../shared/clock.ts';
import {
  type CheckpointHead,
  type CheckpointRecord,
  CheckpointStore,
  INITIAL_HEAD,
} from '../../shared/ledger/checkpoints.ts';
import { keys, type Stream } from '../../shared/ledger/layout.ts';
import { readLedgerStatus } from '../../shared/status/ledger-status.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

const TOPIC = 'orders';
const MINUTE = 60_000;
const CLUSTER_ARN =
  'arn:aws:kafka:eu-west-1:123456789012:cluster/demo/1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d-2';

let resources: TestResources;
let documents: DynamoDBDocumentClient;
const kafka = mockClient(KafkaClient);

beforeAll(async () => {
  resources = await freshResources('status');
  documents = DynamoDBDocumentClient.from(resources.clients.dynamodb);
});

beforeEach(() => kafka.reset());

async function put(item: Record<string, unknown>): Promise<void> {
  await documents.send(new PutCommand({ TableName: resources.table, Item: item }));
}

async function fence(pipeline: string, partition: number, stagedOffset: number): Promise<void> {
  await put({
    ...keys.fence(pipeline, TOPIC, partition),
    topic: TOPIC,
    partition,
    stagedOffset,
    updatedAt: 0,
  });
}

async function staged(
  pipeline: string,
  partition: number,
  range: [number, number],
  stagedAt: number,
  stream: Stream = 'output',
): Promise<void> {
  await put({
    ...keys.staged(pipeline, TOPIC, partition, range[1], stream),
    pipeline,
    stream,
    topic: TOPIC,
    partition,
    firstOffset: range[0],
    lastOffset: range[1],
    key: `${pipeline}/_inprogress/x`,
    recordCount: range[1] - range[0] + 1,
    bytes: 10,
    sha256: 'a',
    md5: 'b',
    gzip: true,
    attemptId: 'att',
    stagedAt,
  });
}

/**
 * Records typed as the coordinator's store writes them, so a change of their shape breaks this test; the cut is
 * written as cut pages through the store, as begin writes it.
 */
async function checkpoint(
  pipeline: string,
  record: Omit<
    CheckpointRecord,
    | 'pipeline'
    | 'owner'
    | 'cutId'
    | 'cutPages'
    | 'partitions'
    | 'changedPartitions'
    | 'previousCutId'
    | 'previousCheckpointId'
    | 'shardCount'
  > & { readonly cut: Record<string, number> },
): Promise<void> {
  const { cut, ...fields } = record;
  const store = new CheckpointStore(resources.clients.dynamodb, resources.table, pipeline);
  const cutId = `${record.checkpointId}#${record.attempt}#${uniqueName('cut')}`;
  const entries = Object.entries(cut).map(([partition, offset]) => ({
    partition,
    previous: -1,
    cut: offset,
  }));
  const cutPages = await store.writeCut(cutId, [entries], []);
  const full: CheckpointRecord = {
    pipeline,
    owner: 'exec-1',
    cutId,
    cutPages,
    partitions: entries.length,
    changedPartitions: entries.length,
    previousCutId: '',
    previousCheckpointId: 0,
    shardCount: 1,
    ...fields,
  };
  await put({ ...keys.checkpoint(pipeline, record.checkpointId), ...full });
}

async function head(pipeline: string, fields: Partial<CheckpointHead>): Promise<void> {
  const item: CheckpointHead = { ...INITIAL_HEAD, ...fields };
  await put({ ...keys.checkpointHead(pipeline), ...item });
}

/**
 * Two partitions. Checkpoint 1 committed the cut {p0: 9, p1: 4}; checkpoint 2 aborted twice and is in flight
 * (PREPARED) in its third attempt. Partition 0 has files above its cut staged 30 and 20 minutes ago;
 * partition 1 none above its cut.
 */
async function seedPipeline(clock: ManualClock): Promise<string> {
  const pipeline = uniqueName('st');
  const t0 = clock.now();
  await Promise.all([fence(pipeline, 0, 29), fence(pipeline, 1, 4)]);
  await Promise.all([
    staged(pipeline, 0, [0, 9], t0 - 60 * MINUTE), // covered by checkpoint 1, not yet cleaned up
    staged(pipeline, 0, [10, 19], t0 - 30 * MINUTE),
    staged(pipeline, 0, [10, 19], t0 - 30 * MINUTE, 'deadletter'),
    staged(pipeline, 0, [20, 29], t0 - 20 * MINUTE),
    staged(pipeline, 1, [0, 4], t0 - 50 * MINUTE), // covered
  ]);
  await checkpoint(pipeline, {
    checkpointId: 1,
    attempt: 1,
    status: 'COMMITTED',
    cut: { [`${TOPIC}#0`]: 9, [`${TOPIC}#1`]: 4 },
    begunAt: t0 - 40 * MINUTE,
    committedAt: t0 - 39 * MINUTE,
  });
  await checkpoint(pipeline, {
    checkpointId: 2,
    attempt: 3,
    status: 'PREPARED',
    cut: { [`${TOPIC}#0`]: 29, [`${TOPIC}#1`]: 4 },
    begunAt: t0 - MINUTE,
    abortCount: 2,
    recentAborts: [
      { attempt: 1, reason: 'staged object missing', at: t0 - 10 * MINUTE },
      { attempt: 2, reason: 'checksum mismatch', at: t0 - 5 * MINUTE },
    ],
  });
  await head(pipeline, {
    checkpointId: 2,
    attempt: 3,
    status: 'PREPARED',
    committedId: 1,
    consecutiveAborts: 2,
    leaseUntil: t0 + 9 * MINUTE,
  });
  return pipeline;
}

describe('readLedgerStatus', () => {
  it('reports checkpoints, staged and committed offsets and the oldest uncommitted staged file', async () => {
    const clock = new ManualClock();
    const pipeline = await seedPipeline(clock);
    clock.advance(5 * MINUTE);
    const status = await readLedgerStatus({
      dynamodb: resources.clients.dynamodb,
      table: resources.table,
      pipeline,
      clock,
    });

    expect(status.lastCommitted?.id).toBe(1);
    expect(status.lastCommitAgeSeconds).toBe(44 * 60);
    expect(status.inFlight).toMatchObject({ id: 2, attempt: 3, status: 'PREPARED' });
    expect(status.head).toMatchObject({ committedId: 1, consecutiveAborts: 2 });
    expect(status.abortedSinceLastCommit).toEqual([
      { checkpointId: 2, attempt: 2, reason: 'checksum mismatch', at: clock.now() - 10 * MINUTE },
      { checkpointId: 2, attempt: 1, reason: 'staged object missing', at: clock.now() - 15 * MINUTE },
    ]);
    expect(status.history.map((c) => c.id)).toEqual([2, 1]);
    expect(status.partitions).toEqual([
      {
        topic: TOPIC,
        partition: 0,
        stagedOffset: 29,
        committedOffset: 9,
        uncommittedFiles: { output: 2, deadletter: 1 },
        uncommittedRecords: 30,
        oldestUncommittedStagedAt: clock.now() - 35 * MINUTE,
        lastStagedAt: undefined,
        freshness: {
          committedBehindStagingSeconds: 35 * 60,
          lastCommittedStaged: { at: clock.now() - 35 * MINUTE, bound: 'at-or-before' },
        },
      },
      {
        topic: TOPIC,
        partition: 1,
        stagedOffset: 4,
        committedOffset: 4,
        uncommittedFiles: { output: 0, deadletter: 0 },
        uncommittedRecords: 0,
        oldestUncommittedStagedAt: undefined,
        // The seeded fence records no time (updatedAt 0): the ledger cannot tell when its data was staged.
        lastStagedAt: undefined,
        freshness: { committedBehindStagingSeconds: 0 },
      },
    ]);
    // The file covered by checkpoint 1 but not yet cleaned up (60 min old) is not "uncommitted".
    expect(status.oldestUncommittedStagedAgeSeconds).toBe(35 * 60);
  });

  it('reads an untouched pipeline as empty, with nothing committed', async () => {
    const status = await readLedgerStatus({
      dynamodb: resources.clients.dynamodb,
      table: resources.table,
      pipeline: uniqueName('empty'),
      clock: new ManualClock(),
    });
    expect(status).toMatchObject({ partitions: [], history: [], oldestUncommittedStagedAgeSeconds: 0 });
    expect(status.lastCommitted).toBeUndefined();
  });

  it('finds the last committed checkpoint beyond the history limit, and an aborted one without notes', async () => {
    const clock = new ManualClock();
    const pipeline = uniqueName('long');
    await fence(pipeline, 0, 50);
    await checkpoint(pipeline, {
      checkpointId: 1,
      attempt: 1,
      status: 'COMMITTED',
      cut: { [`${TOPIC}#0`]: 7 },
      begunAt: 1,
      committedAt: 2,
    });
    for (let id = 2; id <= 7; id++) {
      await checkpoint(pipeline, {
        checkpointId: id,
        attempt: 1,
        status: 'COMMITTED',
        cut: { [`${TOPIC}#0`]: 7 + id },
        begunAt: id,
        committedAt: id,
      });
    }
    await checkpoint(pipeline, {
      checkpointId: 8,
      attempt: 1,
      status: 'ABORTED',
      cut: {},
      begunAt: 8,
      abortedAt: 9,
      abortReason: 'prepare failed',
    });
    await head(pipeline, {
      checkpointId: 8,
      attempt: 1,
      status: 'ABORTED',
      committedId: 3,
      consecutiveAborts: 1,
    });
    const status = await readLedgerStatus({
      dynamodb: resources.clients.dynamodb,
      table: resources.table,
      pipeline,
      clock,
      historyLimit: 2,
    });
    expect(status.history.map((c) => c.id)).toEqual([8, 7]);
    // The head says 3 is the last committed (4..7 are fabricated as committed to prove the head is what counts).
    expect(status.lastCommitted?.id).toBe(3);
    expect(status.partitions[0]?.committedOffset).toBe(10);
    expect(status.inFlight).toBeUndefined();
    expect(status.abortedSinceLastCommit).toEqual([
      { checkpointId: 8, attempt: 1, reason: 'prepare failed', at: 9 },
    ]);
  });
});

describe('eos status', () => {
  async function run(args: string[]): Promise<string> {
    let output = '';
    const program = new Command().exitOverride();
    registerStatusCommand(program, {
      dynamodb: resources.clients.dynamodb,
      kafka: new KafkaClient({ region: 'eu-west-1' }),
      clock: new ManualClock(),
      write: (text) => {
        output += text;
      },
    });
    await program.parseAsync(['node', 'eos', 'status', '--table', resources.table, ...args]);
    return output;
  }

  it('prints the ledger state and the cluster state, warning when IAM authentication is off', async () => {
    const clock = new ManualClock();
    const pipeline = await seedPipeline(clock);
    kafka.on(DescribeClusterV2Command, { ClusterArn: CLUSTER_ARN }).resolves({
      ClusterInfo: {
        ClusterArn: CLUSTER_ARN,
        ClusterName: 'demo',
        ClusterType: 'PROVISIONED',
        State: 'ACTIVE',
        Provisioned: {
          BrokerNodeGroupInfo: undefined,
          NumberOfBrokerNodes: 3,
          ClientAuthentication: {
            Sasl: { Scram: { Enabled: true }, Iam: { Enabled: false } },
            Unauthenticated: { Enabled: false },
          },
        },
      },
    });
    const text = await run(['--pipeline', pipeline, '--cluster-arn', CLUSTER_ARN]);
    expect(text).toMatch(/last committed\s+#1 COMMITTED, begun .*took 1m 0s/);
    expect(text).toMatch(/in flight\s+#2 PREPARED \(attempt 3\)/);
    expect(text).toContain(`lease until ${new Date(clock.now() + 9 * MINUTE).toISOString()}\n`);
    expect(text).toMatch(
      /aborted since last commit:\n\s+#2 attempt 2 at .*: checksum mismatch\n\s+#2 attempt 1/,
    );
    expect(text).toMatch(/orders\s+0\s+29\s+9\s+2\/1\s+30\s+30m 0s/);
    expect(text).toContain('Oldest uncommitted staged file: 30m 0s');
    expect(text).toContain('demo (PROVISIONED) state ACTIVE');
    expect(text).toContain('IAM off, SASL/SCRAM on');
    expect(text).toMatch(/WARNING: IAM authentication is off/);
    expect(kafka.commandCalls(DescribeClusterV2Command)).toHaveLength(1);
  });

  it('prints no IAM warning for a serverless cluster with IAM, and JSON on request', async () => {
    const pipeline = await seedPipeline(new ManualClock());
    kafka.on(DescribeClusterV2Command).resolves({
      ClusterInfo: {
        ClusterArn: CLUSTER_ARN,
        ClusterType: 'SERVERLESS',
        State: 'ACTIVE',
        Serverless: { VpcConfigs: [], ClientAuthentication: { Sasl: { Iam: { Enabled: true } } } },
      },
    });
    const json = JSON.parse(await run(['--pipeline', pipeline, '--cluster-arn', CLUSTER_ARN, '--json']));
    expect(json.cluster).toMatchObject({
      type: 'SERVERLESS',
      authentication: { iam: true, unauthenticated: false },
    });
    expect(json.cluster.warnings).toEqual([]);
    expect(json.ledger.lastCommitted).toMatchObject({ id: 1, cut: { 'orders#0': 9, 'orders#1': 4 } });
  });

  it('warns about a cluster that is not active and skips the cluster without --cluster-arn', async () => {
    const pipeline = await seedPipeline(new ManualClock());
    kafka.on(DescribeClusterV2Command).resolves({
      ClusterInfo: {
        ClusterType: 'PROVISIONED',
        State: 'HEALING',
        Provisioned: {
          BrokerNodeGroupInfo: undefined,
          NumberOfBrokerNodes: 3,
          ClientAuthentication: { Sasl: { Iam: { Enabled: true } } },
        },
      },
    });
    expect(await run(['--pipeline', pipeline, '--cluster-arn', CLUSTER_ARN])).toMatch(
      /WARNING: cluster state is HEALING/,
    );
    expect(await run(['--pipeline', pipeline])).not.toContain('MSK cluster');
    expect(kafka.commandCalls(DescribeClusterV2Command)).toHaveLength(1);
  });
});
