/**
 * Inline staged entries packed into bytes with their stream's key template shared once by the fence
 * (shared/ledger/packed-entry.ts, inline-entries.ts), and the fence's ring of recent batch starts packed into one
 * binary attribute (shared/ledger/recent-starts.ts), under the interleavings a deployed pipeline meets: the orphan
 * sweep, a rolling deploy or a roll-back and roll-forward beside the release before (map-format entries, the ring
 * as a list), rewinds of the consumer group, the upgrade gate, both streams in one chunk, offsets near 2^53.
 */
import { DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { sweepOrphans } from '../../shared/coordinator/cleanup/orphans.ts';
import { CLOSED_ATTRIBUTE } from '../../shared/ledger/epochs.ts';
import { IDENTITY_ATTRIBUTE, unpackIdentity } from '../../shared/ledger/fence-identity.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import {
  ENTRY_ITEMS_NOTED_AT,
  ENTRY_ITEMS_UP_TO,
  INLINE_BYTES_BUDGET,
  inlineAttribute,
  inlineBytesIn,
  templateAttribute,
} from '../../shared/ledger/inline-entries.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { templateOf } from '../../shared/ledger/packed-entry.ts';
import { LEGACY_RING_ATTRIBUTE, RING_ATTRIBUTE, unpackRing } from '../../shared/ledger/recent-starts.ts';
import type { RecordFingerprint, StagedFileEntry } from '../../shared/ledger/records.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { INLINE_GRACE_MS } from '../../shared/processor/inline-gate.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { fenceOf as fenceItemOf, inlineNames } from '../support/inline.ts';
import { ledgerItem } from '../support/legacy-fence.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';
import { expectExactlyOnce, putStagedObject, range } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pka');
});

const doc = () => DynamoDBDocumentClient.from(res.clients.dynamodb);
// No state, no idempotency keys: the fence is a chunk's only item, so its entries go inline (`entriesInline`).
const settingsFor = (): Settings =>
  settingsIn(res, 'pka', { transform: 'passthrough', idempotencyKey: 'none' });
const processorFor = (settings: Settings, extra: Partial<Parameters<typeof createProcessor>[0]> = {}) =>
  createProcessor({ settings, clients: res.clients, ...extra });
const coordinatorFor = (
  settings: Settings,
  extra: Partial<Parameters<typeof createLocalCoordinator>[0]> = {},
) => createLocalCoordinator({ settings, clients: res.clients, ...extra });

const fenceKey = (settings: Settings, partition: number) =>
  fenceKeys.fence(settings.pipelineId, 'orders', partition);

const fenceOf = (settings: Settings, partition: number) => fenceItemOf(res, settings, partition);

/** The outcome of one batch: its partition report, or the error's name and message. */
async function outcomeOf(
  settings: Settings,
  records: Parameters<typeof mskEvent>[0],
): Promise<Record<string, unknown> | string> {
  return processorFor(settings)
    .processEvent(mskEvent(records))
    .then(
      (report) => report.partitions[0] as unknown as Record<string, unknown>,
      (error: unknown) => `${(error as Error).name}: ${(error as Error).message}`,
    );
}

/**
 * A processor of the release before the packed formats (eca2493^: `staging-transaction.ts` `fenceItem`) stages
 * [first, last] on partition `partition` alone: its object, then one conditional UpdateItem of the fence that sets
 * the identity with the ring as a LIST (`recentStarts`, it knows no `ring` and leaves it as it is), the entry-item
 * mark noted at the new offset, and the entry inline as a MAP of named fields (its template in the map).
 */
async function previousReleaseStage(
  settings: Settings,
  partition: number,
  span: { first: number; last: number; expected: number; itemsUpTo: number },
  identity: {
    fenceRecord: RecordFingerprint;
    batchStart: RecordFingerprint;
    recentStarts: RecordFingerprint[];
  },
): Promise<StagedFileEntry> {
  const attemptId = `prev-${span.first}-${span.last}`;
  const spec = { partition, firstOffset: span.first, lastOffset: span.last };
  const entry = await putStagedObject(res.clients, settings, spec, attemptId);
  const map = {
    f: entry.firstOffset,
    c: entry.recordCount,
    b: entry.bytes,
    h: Buffer.from(entry.sha256, 'hex'),
    m: Buffer.from(entry.md5 ?? '', 'hex'),
    g: entry.gzip,
    a: entry.attemptId,
    t: entry.stagedAt,
    k: templateOf(entry),
  };
  await doc().send(
    new UpdateCommand({
      TableName: res.table,
      Key: fenceKey(settings, partition),
      UpdateExpression:
        'SET stagedOffset = :new, updatedAt = :now, topic = :topic, #partition = :partition, ' +
        'fenceRecord = :fenceRecord, batchStart = :batchStart, recentStarts = :recentStarts, ' +
        '#itemsUpTo = :itemsUpTo, #notedAt = :new, #e0 = :e0 REMOVE #stop',
      ConditionExpression: 'stagedOffset = :expected AND attribute_not_exists(#closed)',
      ExpressionAttributeNames: {
        '#partition': 'partition',
        '#stop': 'stoppedBy',
        '#closed': CLOSED_ATTRIBUTE,
        '#itemsUpTo': ENTRY_ITEMS_UP_TO,
        '#notedAt': ENTRY_ITEMS_NOTED_AT,
        '#e0': inlineAttribute(span.last, 'output'),
      },
      ExpressionAttributeValues: {
        ':new': span.last,
        ':now': Date.now(),
        ':topic': 'orders',
        ':partition': partition,
        ':fenceRecord': identity.fenceRecord,
        ':batchStart': identity.batchStart,
        ':recentStarts': identity.recentStarts,
        ':itemsUpTo': span.itemsUpTo,
        ':expected': span.expected,
        ':e0': map,
      },
    }),
  );
  return entry;
}

/**
 * The fingerprints this release's processor writes for batches of 10 from 0 of `partition`'s records (staged on a
 * scratch pipeline: a record's digest is of its key and value, which `orderRecords` makes the same there).
 */
async function fingerprintsOfBatches(
  partition: number,
  batches: number,
): Promise<
  Array<{ fenceRecord: RecordFingerprint; batchStart: RecordFingerprint; ring: RecordFingerprint[] }>
> {
  const scratch = settingsFor();
  // Its gate shut (no checkpoint began on the scratch pipeline), the processor writes the identity as the releases
  // before did: two maps and the ring, digests whole (`fence-identity.ts`).
  const processor = processorFor(scratch, { inlineEntries: 'after-coordinator-upgrade' });
  const found: Array<{
    fenceRecord: RecordFingerprint;
    batchStart: RecordFingerprint;
    ring: RecordFingerprint[];
  }> = [];
  for (let batch = 0; batch < batches; batch++) {
    await processor.processEvent(mskEvent(orderRecords(9, batch * 10, 10, `p${partition}`)));
    const fence = await fenceOf(scratch, 9);
    found.push({
      fenceRecord: fence.fenceRecord as RecordFingerprint,
      batchStart: fence.batchStart as RecordFingerprint,
      ring: unpackRing(fence[RING_ATTRIBUTE])!,
    });
  }
  return found;
}

describe("the orphan sweep and entries that share their stream's key template", () => {
  it("P3/end-to-end 1: the sweep of a cleanup keeps the object of an uncommitted inline entry that shares the fence's template, and the next checkpoint commits it", async () => {
    // Staged inline above a checkpoint's cut (while it runs), the entry 10..14 waits for the next checkpoint. The
    // cleanup of the running one sweeps orphans past the grace period (a coordinator that stalled, or a grace
    // shorter than the time to the next cut) and judges each object by `entryAt`, one projected read of the fence
    // item. A packed entry that shares the fence's template (`k:output`) unpacks only with that template in the
    // projection: without it (as before 2eadced) its object is taken for an orphan and deleted, the next
    // checkpoint can never verify it (C3 aborts, forever) and records 10..14, acknowledged, are lost.
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(orderRecords(0, 0, 5)));
    await processorFor(settings).processEvent(mskEvent(orderRecords(0, 5, 5)));
    const clock = new ManualClock(Date.now() + 2 * settings.orphanGraceSeconds * 1000);
    let raced = false;
    const first = await coordinatorFor(settings, {
      clock,
      hooks: {
        async beforeStep(step) {
          if (step !== 'prepare' || raced) return;
          raced = true;
          await processorFor(settings).processEvent(mskEvent(orderRecords(0, 10, 5)));
        },
      },
    }).runCheckpoint();
    expect(raced).toBe(true);
    expect(first.status).toBe('committed');
    const fence = await fenceOf(settings, 0);
    expect(inlineNames(fence)).toEqual(['e:14:output']);
    expect(typeof fence[templateAttribute('output')]).toBe('string');
    const second = await coordinatorFor(settings, { clock }).runCheckpoint();
    expect(second.status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#0': range(0, 15) });
  });

  it("P3: the sweep keeps the object of a map-format entry the previous release left inline, and deletes an attempt's unreferenced one", async () => {
    const settings = settingsFor();
    const prints = await fingerprintsOfBatches(1, 2);
    await processorFor(settings).processEvent(mskEvent(orderRecords(1, 0, 10)));
    const entry = await previousReleaseStage(
      settings,
      1,
      { first: 10, last: 19, expected: 9, itemsUpTo: 9 },
      { ...prints[1]!, recentStarts: prints[1]!.ring },
    );
    const spec = { partition: 1, firstOffset: 10, lastOffset: 19 };
    const stray = await putStagedObject(res.clients, settings, spec, 'a-crashed-attempt.0');
    const orphans = await sweepOrphans({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
      ledger: new StagedEntries(res.clients.dynamodb, res.table, settings.pipelineId),
      now: Date.now() + 86_400_000,
      graceMs: 1,
    });
    expect(orphans).toEqual([stray.key]);
    expect(orphans).not.toContain(entry.key);
  });
});

describe('the packed ring of recent batch starts beside the list of the previous release', () => {
  it('L2: a group that rewinds two acknowledged batches a processor of the previous release staged gets them acknowledged as a redelivery, not stopped', async () => {
    // A rolling deploy, or a roll-back of the processor to the previous release and forward again (the docs forbid
    // only rolling back past the fence shards and the coordinator past inline entries):
    //   this release     stages 0..9                     ring = [s0] (packed), no list
    //   previous release stages 10..19 and 20..29        list recentStarts = [s0, s10, s20]; `ring` untouched
    //   the group's offset commits for both were lost: 10..19 is delivered again, to this release.
    // Batch 10..19 holds neither the fence record (29), nor the batch start (20): only the ring proves it (s10).
    // The previous release itself would acknowledge it by its list. This release reads `ring` first, which the
    // previous release never updates, so it judges by [s0] alone: "starts below 20" → OffsetsWentBackwardsError,
    // a stop an operator must clear, although the records are the same bytes (a proven redelivery).
    const settings = settingsFor();
    const prints = await fingerprintsOfBatches(2, 3);
    await processorFor(settings).processEvent(mskEvent(orderRecords(2, 0, 10)));
    const packed = await fenceOf(settings, 2);
    expect(unpackIdentity(packed[IDENTITY_ATTRIBUTE])?.recentStarts.map((s) => s.offset)).toEqual([0]);
    expect(packed[RING_ATTRIBUTE]).toBeUndefined();
    expect(packed[LEGACY_RING_ATTRIBUTE]).toBeUndefined();
    await previousReleaseStage(
      settings,
      2,
      { first: 10, last: 19, expected: 9, itemsUpTo: 9 },
      { ...prints[1]!, recentStarts: prints[1]!.ring },
    );
    await previousReleaseStage(
      settings,
      2,
      { first: 20, last: 29, expected: 19, itemsUpTo: 9 },
      { ...prints[2]!, recentStarts: prints[2]!.ring },
    );
    const list = (await fenceOf(settings, 2))[LEGACY_RING_ATTRIBUTE] as RecordFingerprint[];
    expect(list.map((s) => s.offset)).toEqual([0, 10, 20]);
    const outcome = await outcomeOf(settings, orderRecords(2, 10, 10));
    expect(outcome).toMatchObject({ duplicatesByOffset: 10, chunks: 0, stagedOffset: 29 });
  });

  it('L2: the same rewind of two batches this release staged is judged by its packed ring: a redelivery, acknowledged without effects', async () => {
    // The regression guard of the packed ring itself (compare claims.adversarial "offset commits lost for two
    // acknowledged batches"): the ring is one binary attribute and proves the start of the batch two back.
    const settings = settingsFor();
    const processor = processorFor(settings);
    for (let batch = 0; batch < 3; batch++)
      await processor.processEvent(mskEvent(orderRecords(3, batch * 10, 10)));
    const fence = await fenceOf(settings, 3);
    expect(fence[RING_ATTRIBUTE]).toBeUndefined();
    expect(fence[LEGACY_RING_ATTRIBUTE]).toBeUndefined();
    expect(unpackIdentity(fence[IDENTITY_ATTRIBUTE])?.recentStarts.map((s) => s.offset)).toEqual([0, 10, 20]);
    expect(await outcomeOf(settings, orderRecords(3, 10, 10))).toMatchObject({
      duplicatesByOffset: 10,
      chunks: 0,
      stagedOffset: 29,
    });
    // A batch at a remembered start whose bytes differ is another generation: stopped, never dropped.
    const changed = orderRecords(3, 10, 10, 'other');
    expect(await outcomeOf(settings, changed)).toMatch(/OffsetsWentBackwards/);
  });
});

describe('a range of mixed formats and both streams', () => {
  it('end-to-end 1: a range holding packed entries, map-format entries the previous release staged between them, and an entry item is committed exactly once, and cleanup leaves no entry behind', async () => {
    //   this release      0..9   first staging: an entry item
    //   this release     10..19  packed, creates k:output
    //   previous release 20..29  a map (its template in the map), the ring as a list
    //   this release     30..39  packed, shares k:output (a fresh container learns it from its read)
    const settings = settingsFor();
    const prints = await fingerprintsOfBatches(4, 3);
    await processorFor(settings).processEvent(mskEvent(orderRecords(4, 0, 10)));
    await processorFor(settings).processEvent(mskEvent(orderRecords(4, 10, 10)));
    await previousReleaseStage(
      settings,
      4,
      { first: 20, last: 29, expected: 19, itemsUpTo: 9 },
      { ...prints[2]!, recentStarts: prints[2]!.ring },
    );
    await processorFor(settings).processEvent(mskEvent(orderRecords(4, 30, 10)));
    const fence = await fenceOf(settings, 4);
    expect(inlineNames(fence)).toEqual(['e:19:output', 'e:29:output', 'e:39:output']);
    expect(fence['e:29:output']).not.toBeInstanceOf(Uint8Array);
    expect(fence['e:39:output']).toBeInstanceOf(Uint8Array);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#4': range(0, 40) });
    expect(inlineNames(await fenceOf(settings, 4))).toEqual([]);
  });

  it('end-to-end 1: chunks with an output and a dead-letter object (and chunks with dead letters alone) share one template per stream or carry their own, and every record is committed once in its stream', async () => {
    // The output object is the attempt's write .0, the dead-letter object .1; a batch of dead letters alone writes
    // its dead-letter object as .0: another template than the fence's `k:deadletter`, so that entry carries its own.
    const rejectEveryThird: Transform = {
      name: 'reject-every-third',
      apply(record) {
        if (record.offset % 3 === 0 || record.offset >= 40) return { kind: 'poison', error: 'rejected' };
        return { kind: 'ok', rows: [{ offset: record.offset }], state: [] };
      },
    };
    const settings = settingsFor();
    const staging = () => processorFor(settings, { transform: rejectEveryThird });
    for (let batch = 0; batch < 5; batch++)
      await staging().processEvent(mskEvent(orderRecords(5, batch * 10, 10)));
    const warm = staging();
    for (let batch = 5; batch < 7; batch++)
      await warm.processEvent(mskEvent(orderRecords(5, batch * 10, 10)));
    const fence = await fenceOf(settings, 5);
    expect(typeof fence[templateAttribute('output')]).toBe('string');
    expect(typeof fence[templateAttribute('deadletter')]).toBe('string');
    expect(inlineNames(fence)).toContain('e:69:deadletter');
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    const all = range(0, 70);
    await expectExactlyOnce(res.clients, settings, {
      'orders#5': all.filter((o) => o % 3 !== 0 && o < 40),
    });
    await expectExactlyOnce(
      res.clients,
      settings,
      { 'orders#5': all.filter((o) => o % 3 === 0 || o >= 40) },
      'deadletter',
    );
  });

  it('end-to-end 1: inline entries at offsets up to 2^53 - 1 round-trip through the fence and are committed once', async () => {
    const top = Number.MAX_SAFE_INTEGER;
    const settings = settingsFor();
    const processor = processorFor(settings);
    // Timestamps of their own: the helper's default (a date plus the offset) is past 2^53 here.
    const near = (from: number) =>
      orderRecords(6, from, 10).map((spec, i) => ({
        ...spec,
        timestamp: 1_764_374_400_000 + from - (top - 29) + i,
      }));
    for (const from of [top - 29, top - 19, top - 9]) await processor.processEvent(mskEvent(near(from)));
    const fence = await fenceOf(settings, 6);
    expect(inlineNames(fence)).toEqual([`e:${top - 10}:output`, `e:${top}:output`]);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#6': range(top - 29, 30) });
  });
});

describe('the inline budget and the upgrade gate', () => {
  it('L3: while no checkpoint runs, the fence holds at most the budget of packed entries and the chunk past it moves them into items; one checkpoint then commits every record once', async () => {
    const settings = settingsFor();
    const warm = processorFor(settings);
    for (let offset = 0; offset < 40; offset++) await warm.processEvent(mskEvent(orderRecords(7, offset, 1)));
    const fence = await fenceOf(settings, 7);
    const inline = inlineNames(fence).length;
    expect(inlineBytesIn(fence)).toBeLessThanOrEqual(INLINE_BYTES_BUDGET);
    // One-record chunks keep their own key templates (about 140 bytes an entry): a 3 KB budget holds more than a
    // checkpoint interval's 12, not all 39; the chunk past it moved the entries into items and started again.
    expect(inline).toBeGreaterThan(12);
    expect(inline).toBeLessThan(39 - 12);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#7': range(0, 40) });
    expect(inlineNames(await fenceOf(settings, 7))).toEqual([]);
  });

  it("C2: a checkpoint head the previous release's begin wrote (only packedEntriesSince, long ago) keeps a deployed processor of this release staging entry items until this release's begin ran for the grace period", async () => {
    // A coordinator of a release before reads inline entries only as maps, or only in format 1 (with the MD5): an
    // entry of this release would stop it (C3), or, read as no entry, let its cut pass the entry's records. The
    // previous release's begin wrote `packedEntriesSince` and knows nothing of `compactFenceSince`.
    const settings = settingsFor();
    const clock = new ManualClock(Date.now());
    const deployed = () => processorFor(settings, { clock, inlineEntries: 'after-coordinator-upgrade' });
    await deployed().processEvent(mskEvent(orderRecords(8, 0, 5)));
    expect((await coordinatorFor(settings, { clock }).runCheckpoint()).status).toBe('committed');
    // The previous release's begin rewrites the head as it knows it: its own note, long past its grace.
    const head = keys.checkpointHead(settings.pipelineId);
    await doc().send(
      new UpdateCommand({
        TableName: res.table,
        Key: head,
        UpdateExpression: 'SET packedEntriesSince = :long REMOVE compactFenceSince',
        ExpressionAttributeValues: { ':long': clock.now() - 10 * INLINE_GRACE_MS },
      }),
    );
    clock.advance(2 * INLINE_GRACE_MS);
    await deployed().processEvent(mskEvent(orderRecords(8, 5, 5)));
    expect(inlineNames(await fenceOf(settings, 8))).toEqual([]);
    // This release's begin notes its own time; a grace period later a new container stages inline.
    expect((await coordinatorFor(settings, { clock }).runCheckpoint()).status).toBe('committed');
    expect((await ledgerItem(res, head))?.compactFenceSince).toBe(clock.now());
    clock.advance(INLINE_GRACE_MS - 1);
    await deployed().processEvent(mskEvent(orderRecords(8, 10, 5)));
    expect(inlineNames(await fenceOf(settings, 8))).toEqual([]);
    clock.advance(1);
    await deployed().processEvent(mskEvent(orderRecords(8, 15, 5)));
    expect(inlineNames(await fenceOf(settings, 8))).toEqual(['e:19:output']);
    expect((await coordinatorFor(settings, { clock }).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#8': range(0, 20) });
  });
});
