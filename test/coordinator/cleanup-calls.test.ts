/**
 * The calls of a cleanup and of a begin, counted on the SDK clients against DynamoDB Local and the S3 server: a
 * cleanup's deletes of entry items grow with the staged files it removes (S3 DeleteObjects of 1,000 keys, batches
 * of deletes gathered across partitions), not with the partitions they lie in — the per-partition calls left are
 * the reads that find a partition's entries (its fence item, and a Query where entry items may lie) — entries the
 * processor kept inline in a fence go with one UpdateItem of that fence, and a begin's calls do not grow with the
 * partitions at all (fixed fence-shard reads, one cut page per shard at these sizes).
 */
import { DeleteCommand, DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { cleanPartitions } from '../../shared/coordinator/cleanup/partition.ts';
import { createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { coordinatorParts } from '../../shared/coordinator/parts.ts';
import type { CutEntry } from '../../shared/ledger/checkpoints.ts';
import { keys, partitionId } from '../../shared/ledger/layout.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { inProgressPrefix } from '../../shared/sink/layout.ts';
import { listObjects } from '../../shared/sink/objects.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';
import { type FileSpec, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('cleanup-calls');
});

/** `files` files of two offsets each in every one of `partitions` partitions. */
function specs(partitions: number, files: number): FileSpec[] {
  return Array.from({ length: partitions * files }, (_, i) => {
    const partition = i % partitions;
    const file = Math.floor(i / partitions);
    return { partition, firstOffset: 2 * file, lastOffset: 2 * file + 1 };
  });
}

/** Clients of their own, counted (the shared ones serve the staging). */
function counted(): { clients: AwsClients; calls: CallCounter } {
  const clients = createAwsClients();
  return { clients, calls: new CallCounter().attach(clients) };
}

async function stagedKeys(settings: Settings): Promise<string[]> {
  const found: string[] = [];
  for await (const object of listObjects(
    res.clients.s3,
    settings.bucket,
    inProgressPrefix(settings.pipelineId),
  ))
    found.push(object.key);
  return found;
}

/** Stages `partitions` x `files`, then cleans every partition up to `cutAt`; returns the counted calls. */
async function cleanupOf(partitions: number, files: number, cutAt: (partition: number) => number) {
  const settings = settingsIn(res, 'cc');
  await stageFiles(res.clients, settings, specs(partitions, files));
  const cuts: CutEntry[] = Array.from({ length: partitions }, (_, partition) => ({
    partition: partitionId('orders', partition),
    previous: -1,
    cut: cutAt(partition),
  }));
  const { clients, calls } = counted();
  const removed = await cleanPartitions(coordinatorParts({ settings, clients }), cuts);
  return { settings, cuts, removed, calls: calls.snapshot() };
}

describe('cleanup', () => {
  it('deletes the same files in as many calls whether they lie in 6 partitions or 60', async () => {
    const few = await cleanupOf(6, 40, () => 1_000);
    const many = await cleanupOf(60, 4, () => 1_000);
    for (const run of [few, many]) {
      expect(run.removed).toBe(240);
      expect(await stagedKeys(run.settings)).toEqual([]);
    }
    // 240 keys: one DeleteObjects; 240 entries: ten batches of up to 25 conditional deletes; the fence items (their
    // inline entries: none, these files were staged as items) in one BatchGetItem of up to 100. One Query a partition.
    expect(few.calls).toEqual({
      'dynamodb:BatchGetItem': 1,
      'dynamodb:Query': 6,
      'dynamodb:BatchExecuteStatement': 10,
      's3:DeleteObjects': 1,
    });
    expect(many.calls).toEqual({
      'dynamodb:BatchGetItem': 1,
      'dynamodb:Query': 60,
      'dynamodb:BatchExecuteStatement': 10,
      's3:DeleteObjects': 1,
    });
  });

  it('removes entries the processor kept inline with one UpdateItem a partition', async () => {
    // No keyed state: each chunk writes its fence alone, its entry inline. A partition's first staging also settles
    // the legacy fence key (a transaction: its entry is an item), cleaned before the counted cleanup.
    const settings = settingsIn(res, 'cc', { idempotencyKey: 'none', transform: 'passthrough' });
    const processor = createProcessor({ settings, clients: res.clients });
    const stage = (batch: number) =>
      processor.processEvent(mskEvent([0, 1, 2, 3].flatMap((p) => orderRecords(p, batch * 5, 5))));
    const cutsAt = (cut: number) =>
      [0, 1, 2, 3].map((partition) => ({ partition: partitionId('orders', partition), previous: -1, cut }));
    await stage(0);
    expect(await cleanPartitions(coordinatorParts({ settings, clients: res.clients }), cutsAt(4))).toBe(4);
    for (const batch of [1, 2, 3]) await stage(batch);
    const { clients, calls } = counted();
    const parts = coordinatorParts({ settings, clients });
    expect(await cleanPartitions(parts, cutsAt(14))).toBe(8);
    // The ledger's cleanup reads from offset 0 (leftovers of earlier cleanups included), below the fences' entry-item
    // mark (the first staging's item): one Query a partition, which finds nothing. No entry item is deleted.
    expect(calls.snapshot()).toEqual({
      'dynamodb:BatchGetItem': 1,
      'dynamodb:Query': 4,
      'dynamodb:UpdateItem': 4,
      's3:DeleteObjects': 1,
    });
    // The last batch of each partition (above the cut) is still there, inline, with its object.
    expect(await stagedKeys(settings)).toHaveLength(4);
    for (let partition = 0; partition < 4; partition++) {
      const left = [];
      for await (const item of parts.ledger.items('orders', partition, { above: -1, upTo: 100 }))
        left.push(item);
      expect(left.map((item) => [item.kind, item.inline !== undefined, item.at.sk])).toEqual([
        ['entry', true, `${String(19).padStart(20, '0')}#output`],
      ]);
    }
  });

  it('deletes only what lies at or below each partition’s cut', async () => {
    // Partition p is cut after its (p+1)th file: files 0..p go, the rest stay.
    const run = await cleanupOf(5, 4, (partition) => 2 * partition + 1);
    expect(run.removed).toBe(1 + 2 + 3 + 4 + 4);
    const left = await stagedKeys(run.settings);
    expect(left).toHaveLength(20 - run.removed);
    const { ledger } = coordinatorParts({ settings: run.settings, clients: res.clients });
    for (let partition = 0; partition < 5; partition++) {
      for (let file = 0; file < 4; file++) {
        const entry = await ledger.entryAt('orders', partition, 2 * file + 1, 'output');
        expect(entry === undefined, `partition ${partition} file ${file}`).toBe(file <= partition);
      }
    }
  });

  it('a retried cleanup, some entries already gone, costs no call more and no delete per entry', async () => {
    const settings = settingsIn(res, 'cc');
    await stageFiles(res.clients, settings, specs(10, 10));
    const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
    // An earlier cleanup removed one entry of each partition (and died before its objects: the orphan sweep's).
    for (let partition = 0; partition < 10; partition++) {
      await doc.send(
        new DeleteCommand({
          TableName: settings.ledgerTable,
          Key: keys.staged(settings.pipelineId, 'orders', partition, 2 * partition + 1, 'output'),
        }),
      );
    }
    const cuts = Array.from({ length: 10 }, (_, partition) => ({
      partition: partitionId('orders', partition),
      previous: -1,
      cut: 1_000,
    }));
    const { clients, calls } = counted();
    // Items vanish between the cleanup's Query and its transaction: a concurrent cleanup of the same partitions.
    const parts = coordinatorParts({ settings, clients });
    const { ledger } = parts;
    const deleteEntries = ledger.deleteEntries.bind(ledger);
    ledger.deleteEntries = async (targets, chunk, concurrency) => {
      for (const target of targets.filter((_, index) => index % 7 === 3))
        await doc.send(new DeleteCommand({ TableName: settings.ledgerTable, Key: target.at }));
      return deleteEntries(targets, chunk, concurrency);
    };
    const removed = await cleanPartitions(parts, cuts);
    // The 13 gone meanwhile are not counted: their condition finds no item (DynamoDB Local's answer).
    expect(removed).toBe(90 - 13);
    expect(calls.snapshot()).toEqual({
      'dynamodb:BatchGetItem': 1,
      'dynamodb:Query': 10,
      // Four batches of up to 25 deletes, whichever entries vanished meanwhile.
      'dynamodb:BatchExecuteStatement': 4,
      's3:DeleteObjects': 1,
    });
    // What the ledger no longer names stays for the orphan sweep; every object of an entry found is gone.
    const left = await stagedKeys(settings);
    expect(left).toHaveLength(10);
    for (const [partition, key] of left.sort().entries())
      expect(key).toContain(`partition=${partition}/${String(2 * partition).padStart(20, '0')}-`);
  });
});

describe('begin', () => {
  it('makes the same calls over 20 partitions as over 200', async () => {
    const beginCalls = async (partitions: number) => {
      const settings = settingsIn(res, 'cb');
      await stageFiles(res.clients, settings, specs(partitions, 1));
      const { clients, calls } = counted();
      // Both at the most shards a checkpoint has: begin's calls may grow with shards, never with partitions.
      const begun = await createCoordinator({ settings, clients, partitionsPerShard: 1 }).begin({
        execution: 'exec',
      });
      expect(begun.action).toBe('checkpoint');
      return calls.snapshot();
    };
    const few = await beginCalls(20);
    const many = await beginCalls(200);
    expect(many).toEqual(few);
  });
});
