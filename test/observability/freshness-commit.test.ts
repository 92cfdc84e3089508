/**
 * Commit latency (freshness): the coordinator's commit reports, and the commit handler emits as
 * `CommitLatency`, the time from the oldest covered entry's staging to the COMMITTED write. Real processor and
 * coordinator on DynamoDB Local and the S3 server, one manual clock for both.
 */
import type { Context } from 'aws-lambda';
import { afterEach, beforeAll, beforeEach, describe, expect, it, type MockInstance, vi } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings, settingsToEnv } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import type { BeginOutput, CommitOutput } from '../../shared/coordinator/messages.ts';
import { oldestCoveredStagedAt } from '../../shared/observability/commit-latency.ts';
import { METRIC } from '../../shared/observability/names.ts';
import { createProcessor, type Processor } from '../../shared/processor/processor.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('fresh-commit');
});

const SECOND = 1000;

function settingsFor(pipelineId = uniqueName('fc')): Settings {
  return parseSettings({ ledgerTable: res.table, bucket: res.bucket, pipelineId });
}

/** begin … promote, then commit: returns commit's output (cleanup left to the caller). */
async function commitOne(core: Coordinator): Promise<{ begun: BeginOutput; output: CommitOutput }> {
  const execution = uniqueName('exec');
  const begun = await core.begin({ execution });
  if (begun.action !== 'checkpoint') throw new Error(`nothing to checkpoint: ${begun.action}`);
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  await core.decide(ref);
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  return { begun, output: await core.commit(ref) };
}

async function cleanupAll(core: Coordinator, begun: BeginOutput, execution: string): Promise<void> {
  if (begun.action !== 'checkpoint') return;
  for (const shard of begun.shards)
    await core.cleanup({ execution, checkpointId: begun.checkpointId, attempt: begun.attempt, shard });
}

describe('commit latency', () => {
  let settings: Settings;
  let clock: ManualClock;
  let processor: Processor;
  let core: Coordinator;
  beforeEach(() => {
    settings = settingsFor();
    clock = new ManualClock(Date.now());
    processor = createProcessor({ settings, clients: res.clients, clock });
    core = createCoordinator({ settings, clients: res.clients, clock });
  });

  it("is the COMMITTED write's time minus the oldest covered entry's stagedAt, over every partition", async () => {
    const start = clock.now();
    await processor.processEvent(mskEvent(orderRecords(1, 0, 3)));
    clock.advance(5 * SECOND);
    // Partition 0 staged later, but in two batches: its first is still younger than partition 1's.
    await processor.processEvent(mskEvent(orderRecords(0, 0, 2)));
    clock.advance(5 * SECOND);
    await processor.processEvent(mskEvent(orderRecords(0, 2, 2)));
    clock.advance(10 * SECOND);

    const { begun, output } = await commitOne(core);
    expect(output).toMatchObject({
      checkpointId: 1,
      records: 7,
      oldestStagedAt: start,
      commitLatencyMs: 20 * SECOND,
    });

    // A retried commit (already COMMITTED, entries not cleaned yet) reports the same latency: the recorded
    // COMMITTED time, not the retry's clock.
    clock.advance(30 * SECOND);
    const ref = { execution: 'retry', checkpointId: 1, attempt: 1 };
    expect(await core.commit(ref)).toMatchObject({ oldestStagedAt: start, commitLatencyMs: 20 * SECOND });

    // After cleanup the covered entries are gone: no latency rather than a wrong one.
    await cleanupAll(core, begun, 'exec');
    const late = await core.commit(ref);
    expect(late).toMatchObject({ checkpointId: 1, records: 7 });
    expect(late.commitLatencyMs).toBeUndefined();
    expect(late.oldestStagedAt).toBeUndefined();
  });

  it('is taken from the voted plans: the commit reads no staged entry for it', async () => {
    const clients = createAwsClients();
    const stagedQueries: unknown[] = [];
    clients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { ExpressionAttributeValues?: unknown; Key?: { pk?: unknown } };
        const values = JSON.stringify(input.ExpressionAttributeValues ?? {});
        // Entry items are queried; entries kept inline are read with their fence item (inline-entries.ts).
        if (context.commandName === 'QueryCommand' && values.includes('#STAGED#')) stagedQueries.push(input);
        if (context.commandName === 'GetItemCommand' && String(input.Key?.pk).includes('#FENCE#'))
          stagedQueries.push(input);
        return next(args);
      },
      { step: 'initialize', name: 'watchStagedQueries' },
    );
    const watched = createCoordinator({ settings, clients, clock });
    const start = clock.now();
    await processor.processEvent(mskEvent(orderRecords(1, 0, 3)));
    clock.advance(5 * SECOND);
    await processor.processEvent(mskEvent(orderRecords(0, 0, 2)));
    clock.advance(10 * SECOND);

    const execution = uniqueName('exec');
    const begun = await watched.begin({ execution });
    if (begun.action !== 'checkpoint') throw new Error(`nothing to checkpoint: ${begun.action}`);
    const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
    for (const shard of begun.shards) await watched.prepare({ ...ref, shard });
    // Prepare read the covered entries, one read per changed partition; commit needs none of them.
    expect(stagedQueries).toHaveLength(2);
    await watched.decide(ref);
    for (const shard of begun.shards) await watched.promote({ ...ref, shard });
    stagedQueries.length = 0;
    expect(await watched.commit(ref)).toMatchObject({ oldestStagedAt: start, commitLatencyMs: 15 * SECOND });
    expect(stagedQueries).toEqual([]);
  });

  it('covers only what the checkpoint covered: entries committed before do not count', async () => {
    await processor.processEvent(mskEvent(orderRecords(0, 0, 3)));
    clock.advance(60 * SECOND);
    const first = await commitOne(core);
    expect(first.output.commitLatencyMs).toBe(60 * SECOND);
    await cleanupAll(core, first.begun, 'exec');

    clock.advance(100 * SECOND);
    const secondStagedAt = clock.now();
    await processor.processEvent(mskEvent(orderRecords(0, 3, 3)));
    clock.advance(7 * SECOND);
    const second = await commitOne(core);
    expect(second.output).toMatchObject({
      checkpointId: 2,
      records: 3,
      oldestStagedAt: secondStagedAt,
      commitLatencyMs: 7 * SECOND,
    });
  });

  it('reads the first covered entry of each changed partition, skipping items that are not entries', async () => {
    const at = (stagedAt: number) => ({ kind: 'entry' as const, entry: { stagedAt } });
    const items: Record<string, unknown[]> = {
      'orders#0': [{ kind: 'rejected' }, at(300), at(100)],
      'orders#1': [at(200)],
      'orders#2': [at(1)],
    };
    const ledger = {
      async *items(topic: string, partition: number) {
        yield* items[`${topic}#${partition}`] as never[];
      },
    };
    const cut = [
      { partition: 'orders#0', previous: -1, cut: 9 },
      { partition: 'orders#1', previous: 4, cut: 9 },
      // Unchanged: not read, although the fake ledger would answer an older time.
      { partition: 'orders#2', previous: 9, cut: 9 },
    ];
    expect(await oldestCoveredStagedAt(ledger, cut, 4)).toBe(200);
    expect(await oldestCoveredStagedAt(ledger, [cut[2]!], 4)).toBeUndefined();
  });
});

describe('the commit handler', () => {
  let stdout: MockInstance<typeof process.stdout.write>;
  beforeEach(() => {
    stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
  });
  afterEach(() => stdout.mockRestore());

  it('emits CommitLatency with the checkpoint metrics', async () => {
    const settings = settingsFor();
    const env = settingsToEnv({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: settings.pipelineId,
    });
    for (const [name, value] of Object.entries(env)) vi.stubEnv(name, value);
    vi.stubEnv('POWERTOOLS_LOG_LEVEL', 'SILENT');
    const stagedFrom = Date.now();
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(orderRecords(0, 0, 4)));
    // Staged at least 1.5 s before the commit.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const handlers = await import('../../functions/coordinator.ts');
    const context = { functionName: 'coordinator', awsRequestId: 'r-1' } as Context;
    const execution = 'arn:aws:states:us-east-1:123456789012:execution:coordinator:fresh';
    const begun = (await handlers.begin({ execution }, context)) as BeginOutput;
    if (begun.action !== 'checkpoint') throw new Error('expected a checkpoint');
    const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
    await handlers.prepare({ ...ref, shard: 0 }, context);
    await handlers.decide(ref, context);
    await handlers.promote({ ...ref, shard: 0 }, context);
    const output = (await handlers.commit(ref, context)) as CommitOutput;
    const elapsed = Date.now() - stagedFrom;
    expect(output.commitLatencyMs).toBeGreaterThanOrEqual(1500);
    expect(output.commitLatencyMs).toBeLessThanOrEqual(elapsed);

    const emf = stdout.mock.calls
      .flatMap(([chunk]) => String(chunk).split('\n'))
      .filter((line) => line.includes('"_aws"'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const committed = emf.find((blob) => METRIC.commitLatency in blob);
    expect(committed).toMatchObject({
      pipeline: settings.pipelineId,
      [METRIC.commitLatency]: output.commitLatencyMs,
      [METRIC.checkpointsCommitted]: 1,
    });
    vi.unstubAllEnvs();
  });
});
