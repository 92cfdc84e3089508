/**
 * The publish role's least privilege for a replay switch, checked against behaviour: every S3 and DynamoDB call
 * the publish of a switch makes (a switch whose range cuts the live files, over a live output and a generation
 * that both dead-letter records) is allowed by the role the synthesized stack gives the publish function, and
 * the role grants no read the publish never makes (no dead letter). Against DynamoDB Local and the local S3 server (the calls
 * recorded on the SDK clients), the template synthesized here.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { plan, switchTo, tagged } from '../support/generations.ts';
import { type Call, isAllowed, recordCalls, roleStatements } from '../support/iam.ts';
import { synthesize } from '../support/infra.ts';
import { mskEvent, type RecordSpec } from '../support/msk.ts';
import {
  commitCheckpoint,
  expectTableFollows,
  type ReplaySetup,
  records,
  replaySetup,
} from './publish-replay-harness.ts';

type TemplateJson = Parameters<typeof roleStatements>[0];

const deployed = synthesize({
  outputFormat: 'parquet',
  timePartitioning: 'hour',
  iceberg: { catalog: 'file' },
});
const template = deployed.template.toJSON() as TemplateJson;
const publishId = deployed.stack.getLogicalId(
  deployed.stack.pipeline.coordinator.publishFunction!.node.defaultChild as never,
);

let res: TestResources;
let calls: Call[];
let deadLetterKeys: string[];

async function deliverWith(
  s: ReplaySetup,
  input: readonly RecordSpec[],
  transform: Transform,
  generation?: number,
): Promise<void> {
  const processor = createProcessor({
    settings: generation === undefined ? s.settings : { ...s.settings, replayGeneration: generation },
    clients: s.res.clients,
    transform,
  });
  for (let from = 0; from < 20; from += 5) {
    await processor.processEvent(mskEvent(input.filter((r) => r.offset >= from && r.offset < from + 5)));
  }
}

beforeAll(async () => {
  res = await freshResources('pubiam');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
  // The synthesized stack's pipeline, `orders`, with its table where the construct puts it.
  const s = replaySetup(res, 'orders', 'orders');
  let recording = false;
  calls = [];
  recordCalls(res.clients, (found) => {
    if (recording) calls.push(...found);
  });
  await deliverWith(
    s,
    records(0, 20),
    tagged('L', (offset) => offset === 5),
  );
  await commitCheckpoint(s);
  await publishCheckpoint(s.parts, 1);
  await plan(res, s.settings, 3, 14);
  await deliverWith(
    s,
    records(0, 20),
    tagged('g1', (offset) => offset === 7),
    1,
  );
  await switchTo(res, s.settings, 1);
  await commitCheckpoint(s);
  recording = true;
  try {
    expect((await publishCheckpoint(s.parts, 2)).published.map((p) => p.how)).toEqual(['appended']);
  } finally {
    recording = false;
  }
  await expectTableFollows(s, 'the switch');
  deadLetterKeys = [];
  for (const id of [1, 2]) {
    const manifest = await s.parts.manifests.read(id);
    deadLetterKeys.push(
      ...(manifest?.files ?? []).filter((f) => f.stream === 'deadletter').map((f) => f.key),
    );
  }
}, 120_000);

afterAll(() => {
  vi.unstubAllGlobals();
});

describe('the publish role and the publish of a replay switch', () => {
  it('allows every call the publish of a switch makes, which reads the cut output files and no dead letter', () => {
    const statements = roleStatements(template, publishId);
    expect(calls.filter((call) => !isAllowed(template, statements, call))).toEqual([]);
    const finalReads = calls.filter(
      (c) => c.action === 's3:GetObject' && c.target.startsWith('orders/final/'),
    );
    expect(finalReads.length).toBeGreaterThan(0);
    expect(finalReads.filter((c) => !c.target.startsWith('orders/final/output/'))).toEqual([]);
    expect(deadLetterKeys.length).toBeGreaterThanOrEqual(4);
  });

  it('grants no read of dead-letter objects, which a publish never makes', () => {
    const statements = roleStatements(template, publishId);
    const reads = deadLetterKeys.map((target) => ({ action: 's3:GetObject', target, leadingKeys: [] }));
    expect(reads.filter((call) => isAllowed(template, statements, call))).toEqual([]);
  });
});
