/**
 * The publish step's least privilege, checked against behaviour: every S3 and DynamoDB call a publish makes on the
 * local parts (a first publish into a table without metadata, a retried one, one that catches up an earlier
 * checkpoint, and a replay switch's overwrite, which reads a final object it cuts and writes position delete files)
 * is allowed by the role the synthesized stack gives the publish function, and its object writes by the
 * deployed bucket policy too; and nothing is granted that it never calls.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../shared/clock.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { publishedTable } from '../../shared/coordinator/publish/target.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { TableSnapshots } from '../../shared/ledger/table-snapshots.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { commitCheckpoint, deliver, records, replaySetup } from '../coordinator/publish-replay-harness.ts';
import { resolveIntrinsics } from '../support/asl.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { plan, switchTo } from '../support/generations.ts';
import {
  bucketPolicyStatements,
  type Call,
  evaluate,
  isAllowed,
  type PolicyStatement,
  recordCalls,
  roleArnOf,
  roleStatements,
  sinkBucketLogicalId,
} from '../support/iam.ts';
import { synthesize } from '../support/infra.ts';
import { commitNext, PUBLISH_COLUMNS, type PublishSetup } from '../support/publish.ts';

type TemplateJson = Parameters<typeof roleStatements>[0];

let res: TestResources;
let calls: Call[];
const deployed = synthesize({
  outputFormat: 'parquet',
  timePartitioning: 'hour',
  iceberg: { catalog: 'file' },
});
const template = deployed.template.toJSON() as TemplateJson;
const publishId = deployed.stack.getLogicalId(
  deployed.stack.pipeline.coordinator.publishFunction!.node.defaultChild as never,
);

/** The harness's setup for pipeline `orders` (the synthesized stack's), its table where the construct puts it. */
function ordersSetup(): PublishSetup {
  const settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: 'orders',
    outputFormat: 'parquet',
    timePartitioning: 'hour',
    outputColumns: PUBLISH_COLUMNS,
  });
  const { s3, dynamodb } = res.clients;
  const catalog = new FileCatalog(s3, res.bucket, 'orders/iceberg/output');
  const table = publishedTable({
    location: catalog.location,
    columns: PUBLISH_COLUMNS,
    timePartitioning: 'hour',
  });
  const errors: string[] = [];
  return {
    settings,
    catalog,
    errors,
    staged: 0,
    base: 0,
    parts: {
      pipelineId: 'orders',
      bucket: res.bucket,
      s3,
      clock: systemClock,
      log: { info: () => {}, error: (message) => errors.push(message) },
      store: new CheckpointStore(dynamodb, res.table, 'orders'),
      manifests: new ManifestStore(s3, res.bucket, 'orders'),
      snapshots: new TableSnapshots(dynamodb, res.table, 'orders'),
      target: { catalog, table },
    },
  };
}

beforeAll(async () => {
  res = await freshResources('iceberg-iam');
  const setup = ordersSetup();
  let recording = false;
  calls = [];
  recordCalls(res.clients, (found) => {
    if (recording) calls.push(...found);
  });
  const publish = async (checkpointId: number) => {
    recording = true;
    try {
      return await publishCheckpoint(setup.parts, checkpointId);
    } finally {
      recording = false;
    }
  };
  await commitNext(res, setup);
  expect((await publish(1)).publishedUpTo).toBe(1);
  expect((await publish(1)).published).toEqual([]);
  await commitNext(res, setup);
  await commitNext(res, setup);
  // Checkpoint 2 was never published: publishing 3 catches it up first.
  expect((await publish(3)).published.map((p) => p.checkpointId)).toEqual([2, 3]);

  // A replay switch of pipeline `orders` in a table and bucket of their own: generation 1 over offsets 3..14 cuts
  // each live file of offsets 0..19, so the switch's overwrite reads those files' offsets and writes position deletes.
  const replay = await freshResources('iceberg-iam-replay');
  recordCalls(replay.clients, (found) => {
    if (recording) calls.push(...found);
  });
  const s = replaySetup(replay, 'orders', 'orders');
  await deliver(s, records(0, 20));
  await commitCheckpoint(s);
  await plan(replay, s.settings, 3, 14);
  await deliver(s, records(0, 20), { generation: 1, size: 4 });
  await commitCheckpoint(s);
  await switchTo(replay, s.settings, 1);
  await commitCheckpoint(s);
  recording = true;
  try {
    expect((await publishCheckpoint(s.parts, 3)).publishedUpTo).toBe(3);
  } finally {
    recording = false;
  }
}, 180_000);

describe('the publish role', () => {
  it('is granted every call a publish makes, on exactly the keys and prefixes it touches', () => {
    const statements = roleStatements(template, publishId);
    expect(calls.length).toBeGreaterThan(10);
    expect(calls.filter((call) => !isAllowed(template, statements, call))).toEqual([]);
    // The table was made, listed, read and written under its metadata prefix; manifests were read.
    expect(
      calls.some(
        (c) => c.action === 's3:ListBucket' && c.target.startsWith('orders/iceberg/output/metadata/'),
      ),
    ).toBe(true);
    expect(
      calls.some(
        (c) => c.action === 's3:PutObject' && c.target.startsWith('orders/iceberg/output/metadata/'),
      ),
    ).toBe(true);
    expect(calls.some((c) => c.action === 's3:GetObject' && c.target.startsWith('orders/_manifests/'))).toBe(
      true,
    );
    // The switch read a final object it cuts and wrote its position delete files under the metadata prefix.
    expect(
      calls.some((c) => c.action === 's3:GetObject' && c.target.startsWith('orders/final/output/')),
    ).toBe(true);
    expect(
      calls.some(
        (c) => c.action === 's3:PutObject' && c.target.startsWith('orders/iceberg/output/metadata/deletes/'),
      ),
    ).toBe(true);
    // Nothing granted that the publish step never calls.
    const called = new Set(calls.map((c) => c.action));
    const granted = statements.flatMap((s) => [s.Action].flat()).filter((a) => /^(dynamodb|s3):/.test(a));
    expect(granted.filter((action) => !called.has(action))).toEqual([]);
    // And the check can fail: a write of final data, a cut page, another pipeline's items are not granted.
    for (const call of [
      { action: 's3:PutObject', target: 'orders/final/output/x.parquet', leadingKeys: [] },
      { action: 's3:GetObject', target: 'orders/_inprogress/x', leadingKeys: [] },
      { action: 'dynamodb:GetItem', target: 'table', leadingKeys: ['orders#CHECKPOINT#CUT#c'] },
      { action: 'dynamodb:PutItem', target: 'table', leadingKeys: ['other#CHECKPOINT'] },
      { action: 'dynamodb:UpdateItem', target: 'table', leadingKeys: ['orders#CHECKPOINT'] },
    ]) {
      expect(isAllowed(template, statements, call), `${call.action} ${call.target} ${call.leadingKeys}`).toBe(
        false,
      );
    }
  });

  it("may make every object write a publish makes under the deployed pipeline's bucket policy", () => {
    const bucketId = sinkBucketLogicalId(template);
    const bucketArn = String(resolveIntrinsics({ 'Fn::GetAtt': [bucketId, 'Arn'] }, template));
    const bucketPolicy = bucketPolicyStatements(template, bucketId);
    const writes = calls.filter((c) => c.action === 's3:PutObject');
    expect(writes.length).toBeGreaterThan(0);
    const refused = writes.filter(
      (call) =>
        evaluate(template, roleStatements(template, publishId) as PolicyStatement[], bucketPolicy, {
          principal: roleArnOf(template, publishId),
          action: call.action,
          resource: `${bucketArn}/${call.target}`,
          context: { 'aws:SecureTransport': 'true', ...call.context },
        }) !== 'allow',
    );
    expect(refused).toEqual([]);
  });
});
