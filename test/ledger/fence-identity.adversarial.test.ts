/**
 * The fence's identity packed into one attribute with its digests cut to 16 bytes (shared/ledger/fence-identity.ts),
 * the older form (two maps and the ring) still written while the processor's gate is shut, and inline entries
 * without their MD5 (packed-entry.ts format 2), under the interleavings a deployed pipeline meets: a container whose
 * gate is shut writing after one whose gate is open, a processor of the previous release writing after this one
 * (maps and the packed ring, the packed identity left as it was), an identity that does not pack at one write and
 * packs at the next, producer-chosen timestamps and offsets near the limits, a crash between chunks and the
 * mapping's retry, a forged attribute, and a whole upgrade from the previous release to this one.
 */
import { DynamoDBDocumentClient, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { CLOSED_ATTRIBUTE } from '../../shared/ledger/epochs.ts';
import { IDENTITY_ATTRIBUTE, packIdentity, unpackIdentity } from '../../shared/ledger/fence-identity.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import {
  ENTRY_ITEMS_NOTED_AT,
  ENTRY_ITEMS_UP_TO,
  inlineAttribute,
  inlineBytesIn,
} from '../../shared/ledger/inline-entries.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { packEntryValue } from '../../shared/ledger/packed-entry.ts';
import {
  LEGACY_RING_ATTRIBUTE,
  packRing,
  RING_ATTRIBUTE,
  unpackRing,
} from '../../shared/ledger/recent-starts.ts';
import { RECENT_STARTS, type RecordFingerprint, type StagedFileEntry } from '../../shared/ledger/records.ts';
import { recordDigest } from '../../shared/processor/evaluate.ts';
import { INLINE_GRACE_MS } from '../../shared/processor/inline-gate.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { readLedgerStatus } from '../../shared/status/ledger-status.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { crashAt } from '../support/hooks.ts';
import { entryItemsOf, fenceOf as fenceItemOf, inlineNames } from '../support/inline.ts';
import { mskEvent, mskRecord, orderRecords, type RecordSpec } from '../support/msk.ts';
import { expectExactlyOnce, putStagedObject, range } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('fid');
});

const doc = () => DynamoDBDocumentClient.from(res.clients.dynamodb);
// No state, no idempotency keys: the fence is a chunk's only item, so its entries go inline.
const settingsFor = (overrides: Parameters<typeof settingsIn>[2] = {}): Settings =>
  settingsIn(res, 'fid', { transform: 'passthrough', idempotencyKey: 'none', ...overrides });
const processorFor = (settings: Settings, extra: Partial<Parameters<typeof createProcessor>[0]> = {}) =>
  createProcessor({ settings, clients: res.clients, ...extra });
/** A deployed processor: its gate reads the checkpoint head (shut on a pipeline whose begin never ran). */
const deployedFor = (settings: Settings, extra: Partial<Parameters<typeof createProcessor>[0]> = {}) =>
  processorFor(settings, { inlineEntries: 'after-coordinator-upgrade', ...extra });
const coordinatorFor = (
  settings: Settings,
  extra: Partial<Parameters<typeof createLocalCoordinator>[0]> = {},
) => createLocalCoordinator({ settings, clients: res.clients, ...extra });

const fenceKey = (settings: Settings, partition: number) =>
  fenceKeys.fence(settings.pipelineId, 'orders', partition);
const fenceOf = (settings: Settings, partition: number) => fenceItemOf(res, settings, partition);

/** The fingerprint the processor computes for a record (`recordDigest` of its key and value as delivered). */
function printOf(spec: RecordSpec): RecordFingerprint {
  const record = mskRecord(spec);
  return {
    offset: record.offset,
    digest: recordDigest({ rawKey: record.key ?? null, rawValue: record.value ?? null }),
    timestamp: record.timestamp,
  };
}

/** A digest cut as the packed identity keeps it. */
const cutDigest = (digest: string) => Buffer.from(digest, 'base64url').subarray(0, 16).toString('base64url');

/** The outcome of one batch: its partition report, or the error's name and message. */
async function outcomeOf(
  processor: ReturnType<typeof createProcessor>,
  records: readonly RecordSpec[],
): Promise<Record<string, unknown> | string> {
  return processor.processEvent(mskEvent(records)).then(
    (report) => report.partitions[0] as unknown as Record<string, unknown>,
    (error: unknown) => `${(error as Error).name}: ${(error as Error).message}`,
  );
}

/** Format 1 of an inline entry (the release before: the MD5 after the SHA-256), from this release's format 2. */
function formatOneOf(entry: StagedFileEntry): Uint8Array {
  const two = Buffer.from(packEntryValue(entry, false));
  let at = 2;
  for (let varints = 0; varints < 4; varints++) {
    while (two[at]! & 0x80) at++;
    at++;
  }
  const sha = at + 32;
  return Buffer.concat([
    Buffer.from([1]),
    two.subarray(1, sha),
    Buffer.from(entry.md5!, 'hex'),
    two.subarray(sha),
  ]);
}

/**
 * A processor of the release before this one (61bd1d6^, `staging-transaction.ts` `fenceItem`) stages `records` on
 * `partition`: its object, then the fence moved from `expected` with the identity as two maps and the ring packed
 * at 48 bytes a start (`ring`, the list `recentStarts` removed). It knows no `identity` attribute and leaves it as
 * it is. The entry goes inline in format 1 (its gate open on `packedEntriesSince`) or as an item (gate shut).
 * `ring` is what it carries forward: it reads the identity only as maps, so after this release's packed write it
 * finds none and starts the ring again from its batch start.
 */
async function previousReleaseStage(
  settings: Settings,
  partition: number,
  records: readonly RecordSpec[],
  expected: number,
  ring: readonly RecordFingerprint[],
  place: 'inline' | 'item',
): Promise<StagedFileEntry> {
  const first = records[0]!.offset;
  const last = records.at(-1)!.offset;
  const batchStart = printOf(records[0]!);
  const recentStarts = [...ring.filter((s) => s.offset !== first), batchStart].slice(-RECENT_STARTS);
  const packed = packRing(recentStarts);
  const entry = await putStagedObject(
    res.clients,
    settings,
    { partition, firstOffset: first, lastOffset: last },
    `prev-${first}-${last}`,
  );
  const update = {
    TableName: res.table,
    Key: fenceKey(settings, partition),
    UpdateExpression:
      'SET stagedOffset = :new, updatedAt = :now, topic = :topic, #partition = :partition, ' +
      `fenceRecord = :fenceRecord, batchStart = :batchStart, ${packed ? '#ring = :ring' : '#legacyRing = :ring'}, ` +
      `#itemsUpTo = :itemsUpTo, #notedAt = :new${place === 'inline' ? ', #e0 = :e0' : ''} ` +
      `REMOVE #stop, ${packed ? '#legacyRing' : '#ring'}`,
    ConditionExpression: 'stagedOffset = :expected AND attribute_not_exists(#closed)',
    ExpressionAttributeNames: {
      '#partition': 'partition',
      '#stop': 'stoppedBy',
      '#closed': CLOSED_ATTRIBUTE,
      '#ring': RING_ATTRIBUTE,
      '#legacyRing': LEGACY_RING_ATTRIBUTE,
      '#itemsUpTo': ENTRY_ITEMS_UP_TO,
      '#notedAt': ENTRY_ITEMS_NOTED_AT,
      ...(place === 'inline' ? { '#e0': inlineAttribute(last, 'output') } : {}),
    },
    ExpressionAttributeValues: {
      ':new': last,
      ':now': Date.now(),
      ':topic': 'orders',
      ':partition': partition,
      ':fenceRecord': printOf(records.at(-1)!),
      ':batchStart': batchStart,
      ':ring': packed ?? recentStarts,
      ':itemsUpTo': place === 'inline' ? expected : last,
      ':expected': expected,
      ...(place === 'inline' ? { ':e0': formatOneOf(entry) } : {}),
    },
  };
  if (place === 'inline') {
    await doc().send(new UpdateCommand(update));
  } else {
    await doc().send(
      new TransactWriteCommand({
        TransactItems: [
          { Update: update },
          {
            Put: {
              TableName: res.table,
              Item: { ...keys.staged(settings.pipelineId, 'orders', partition, last, 'output'), ...entry },
              ConditionExpression: 'attribute_not_exists(pk)',
            },
          },
        ],
      }),
    );
  }
  return entry;
}

/** The identity attributes a fence item holds, by name. */
const identityAttributes = (fence: Record<string, unknown>) =>
  [IDENTITY_ATTRIBUTE, 'fenceRecord', 'batchStart', RING_ATTRIBUTE, LEGACY_RING_ATTRIBUTE].filter(
    (name) => fence[name] !== undefined,
  );

describe('the two forms of the identity, one after the other', () => {
  it('the fingerprints these tests compute are the ones the processor writes', async () => {
    const settings = settingsFor();
    await deployedFor(settings).processEvent(mskEvent(orderRecords(0, 0, 10)));
    const fence = await fenceOf(settings, 0);
    expect(fence.fenceRecord).toEqual(printOf(orderRecords(0, 9, 1)[0]!));
    expect(fence.batchStart).toEqual(printOf(orderRecords(0, 0, 1)[0]!));
  });

  it('L2: after a packed identity, a container whose gate is still shut writes the older form, its ring carrying the cut digests: a rewind two batches back is a proven redelivery, other bytes at a remembered start stop', async () => {
    // Gates open per container, at most five minutes apart: a packed write, then one of the older form whose ring
    // was read packed (digests of 16 bytes, which the 48-byte ring cannot hold: the list form).
    const settings = settingsFor();
    const open = processorFor(settings);
    await open.processEvent(mskEvent(orderRecords(1, 0, 10)));
    await open.processEvent(mskEvent(orderRecords(1, 10, 10)));
    expect(identityAttributes(await fenceOf(settings, 1))).toEqual([IDENTITY_ATTRIBUTE]);
    await deployedFor(settings).processEvent(mskEvent(orderRecords(1, 20, 10)));
    const fence = await fenceOf(settings, 1);
    expect(identityAttributes(fence)).toEqual(['fenceRecord', 'batchStart', LEGACY_RING_ATTRIBUTE]);
    const list = fence[LEGACY_RING_ATTRIBUTE] as RecordFingerprint[];
    expect(list.map((s) => s.offset)).toEqual([0, 10, 20]);
    expect(list[0]!.digest).toBe(cutDigest(printOf(orderRecords(1, 0, 1)[0]!).digest));
    // Read by a fresh container of either gate: the batch two back is the same bytes.
    for (const reader of [processorFor(settings), deployedFor(settings)]) {
      expect(await outcomeOf(reader, orderRecords(1, 10, 10))).toMatchObject({
        duplicatesByOffset: 10,
        chunks: 0,
        stagedOffset: 29,
      });
      expect(await outcomeOf(reader, orderRecords(1, 0, 10))).toMatchObject({
        duplicatesByOffset: 10,
        chunks: 0,
      });
    }
    expect(await outcomeOf(processorFor(settings), orderRecords(1, 10, 10, 'another generation'))).toMatch(
      /OffsetsWentBackwards/,
    );
    // And back to the packed form: the ring round-trips its mixed digests.
    await processorFor(settings).processEvent(mskEvent(orderRecords(1, 30, 10)));
    const again = await fenceOf(settings, 1);
    expect(identityAttributes(again)).toEqual([IDENTITY_ATTRIBUTE]);
    expect(unpackIdentity(again[IDENTITY_ATTRIBUTE])?.recentStarts.map((s) => s.offset)).toEqual([
      0, 10, 20, 30,
    ]);
    expect(await outcomeOf(processorFor(settings), orderRecords(1, 0, 10))).toMatchObject({
      duplicatesByOffset: 10,
    });
    expect(await outcomeOf(processorFor(settings), orderRecords(1, 0, 10, 'another generation'))).toMatch(
      /OffsetsWentBackwards/,
    );
  });

  it('P4/L2: a packed identity a processor of the previous release left stale beside its newer maps is not taken for the fence: its own batch redelivered is acknowledged, a rewound topic below it stops, nothing is skipped', async () => {
    //   this release      0..9, 10..19   packed identity (fence 19)
    //   previous release 20..29          maps at 29 and `ring` = [s20] (it read no identity), `identity` left at 19
    const settings = settingsFor();
    const warm = processorFor(settings);
    await warm.processEvent(mskEvent(orderRecords(2, 0, 10)));
    await warm.processEvent(mskEvent(orderRecords(2, 10, 10)));
    await previousReleaseStage(settings, 2, orderRecords(2, 20, 10), 19, [], 'item');
    const fence = await fenceOf(settings, 2);
    expect(unpackIdentity(fence[IDENTITY_ATTRIBUTE])?.fenceRecord.offset).toBe(19);
    expect(fence.stagedOffset).toBe(29);
    // A warm container of this release holds the fence at 19: its condition fails, it reads 29 and the maps.
    expect(await outcomeOf(warm, orderRecords(2, 20, 10))).toMatchObject({
      duplicatesByOffset: 10,
      chunks: 0,
    });
    expect(await outcomeOf(processorFor(settings), orderRecords(2, 20, 10))).toMatchObject({
      duplicatesByOffset: 10,
      stagedOffset: 29,
    });
    // Another generation: the same offsets hold other records. At the maps' batch start it stops; below it (where
    // only the stale identity remembers anything) it stops too: never acknowledged as a redelivery.
    expect(await outcomeOf(processorFor(settings), orderRecords(2, 20, 10, 'regenerated'))).toMatch(
      /OffsetsWentBackwards/,
    );
    expect(await outcomeOf(processorFor(settings), orderRecords(2, 10, 10, 'regenerated'))).toMatch(
      /OffsetsWentBackwards/,
    );
    expect(await outcomeOf(processorFor(settings), orderRecords(2, 19, 11, 'regenerated'))).toMatch(
      /OffsetsWentBackwards/,
    );
    // Moving on, this release writes the packed form alone again (the stale one replaced, the maps removed).
    await processorFor(settings).processEvent(mskEvent(orderRecords(2, 30, 10)));
    const after = await fenceOf(settings, 2);
    expect(identityAttributes(after)).toEqual([IDENTITY_ATTRIBUTE]);
    expect(unpackIdentity(after[IDENTITY_ATTRIBUTE])?.recentStarts.map((s) => s.offset)).toEqual([20, 30]);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#2': range(0, 40) });
  });

  it('P4: an identity that does not pack (producer timestamps more than 2^52 ms apart) is written in the older form, and packed again once its start leaves the ring; redeliveries and rewinds are judged alike under both', async () => {
    const settings = settingsFor();
    const warm = processorFor(settings);
    const at = (from: number, timestamp: (offset: number) => number, prefix?: string) =>
      orderRecords(3, from, 10, prefix).map((spec) => ({ ...spec, timestamp: timestamp(spec.offset) }));
    const normal = (offset: number) => 1_796_553_718_000 + offset;
    // The batch 10..19 starts at a timestamp far below its last record's: the start does not pack.
    const odd = (offset: number) => (offset === 10 ? -(2 ** 52) : 2 ** 52 - 1);
    await warm.processEvent(mskEvent(at(0, normal)));
    expect(identityAttributes(await fenceOf(settings, 3))).toEqual([IDENTITY_ATTRIBUTE]);
    await warm.processEvent(mskEvent(at(10, odd)));
    let fence = await fenceOf(settings, 3);
    // The older form (the ring packed at 48 bytes: this container carries its own whole digests forward).
    expect(identityAttributes(fence)[0]).toBe('fenceRecord');
    expect(fence[IDENTITY_ATTRIBUTE]).toBeUndefined();
    expect((fence.batchStart as RecordFingerprint).timestamp).toBe(-(2 ** 52));
    for (let batch = 2; batch < 2 + RECENT_STARTS; batch++) {
      await warm.processEvent(mskEvent(at(batch * 10, normal)));
      fence = await fenceOf(settings, 3);
      // While the start of 10..19 is in the ring, no write packs.
      const holds = batch - 1 < RECENT_STARTS;
      expect(identityAttributes(fence)[0]).toBe(holds ? 'fenceRecord' : IDENTITY_ATTRIBUTE);
      if (batch === 3) {
        // A rewind to the odd batch, while the older form is there: the same bytes and timestamps are a
        // redelivery; the same bytes with the start's timestamp another value are not.
        expect(await outcomeOf(processorFor(settings), at(10, odd))).toMatchObject({
          duplicatesByOffset: 10,
        });
        expect(
          await outcomeOf(
            processorFor(settings),
            at(10, () => 2 ** 52 - 1),
          ),
        ).toMatch(/OffsetsWentBackwards/);
      }
    }
    expect(unpackIdentity(fence[IDENTITY_ATTRIBUTE])?.recentStarts.map((s) => s.offset)).toEqual(
      Array.from({ length: RECENT_STARTS }, (_, i) => 20 + i * 10),
    );
    expect(await outcomeOf(processorFor(settings), at(30, normal))).toMatchObject({ duplicatesByOffset: 10 });
    expect(
      await outcomeOf(
        processorFor(settings),
        at(30, (o) => normal(o) + 1),
      ),
    ).toMatch(/OffsetsWentBackwards/);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#3': range(0, 100) });
  });
});

describe('values near the limits of the packed form', () => {
  it('L2: records without timestamps (-1): a rewind two batches back is a redelivery; the same bytes at a remembered start with timestamp 0 (its zigzag neighbour) stop', async () => {
    const settings = settingsFor();
    const warm = processorFor(settings);
    const none = (from: number, timestamp = -1) =>
      orderRecords(4, from, 10).map((spec) => ({ ...spec, timestamp }));
    for (let batch = 0; batch < 3; batch++) await warm.processEvent(mskEvent(none(batch * 10)));
    const identity = unpackIdentity((await fenceOf(settings, 4))[IDENTITY_ATTRIBUTE]);
    expect(identity?.recentStarts.map((s) => s.timestamp)).toEqual([-1, -1, -1]);
    expect(await outcomeOf(processorFor(settings), none(10))).toMatchObject({ duplicatesByOffset: 10 });
    expect(await outcomeOf(processorFor(settings), none(10, 0))).toMatch(/OffsetsWentBackwards/);
    expect(await outcomeOf(processorFor(settings), none(0, -2))).toMatch(/OffsetsWentBackwards/);
    expect(await outcomeOf(processorFor(settings), none(20, 1))).toMatch(/OffsetsWentBackwards/);
  });

  it('L2: timestamps at the edge of the packed range (2^52 - 1 ms either side of the fence record) are packed and read back exactly: a redelivery is proven, one millisecond off stops', async () => {
    const settings = settingsFor();
    const warm = processorFor(settings);
    const edge = 2 ** 52 - 1;
    // Each batch's records share a timestamp; the last batch's (the fence record's) is 0.
    const stamps = [0, edge, -edge, 0];
    const at = (b: number, shift = 0) =>
      orderRecords(5, b * 10, 10).map((spec) => ({ ...spec, timestamp: stamps[b]! + shift }));
    for (let b = 0; b < stamps.length; b++) await warm.processEvent(mskEvent(at(b)));
    const identity = unpackIdentity((await fenceOf(settings, 5))[IDENTITY_ATTRIBUTE]);
    expect(identity?.recentStarts.map((s) => s.timestamp)).toEqual(stamps);
    expect(identity?.fenceRecord.timestamp).toBe(0);
    for (let b = 0; b < stamps.length; b++) {
      expect(await outcomeOf(processorFor(settings), at(b))).toMatchObject({ duplicatesByOffset: 10 });
      expect(await outcomeOf(processorFor(settings), at(b, b === 1 ? -1 : 1))).toMatch(
        /OffsetsWentBackwards/,
      );
    }
  });

  it('L2: a ring of starts up to 2^53 - 1, packed: the rewind two batches back is a redelivery, other bytes stop, and the records are committed once', async () => {
    const top = Number.MAX_SAFE_INTEGER;
    const settings = settingsFor();
    const warm = processorFor(settings);
    const near = (from: number, prefix?: string) =>
      orderRecords(6, from, 10, prefix).map((spec, i) => ({ ...spec, timestamp: 1_764_374_400_000 + i }));
    for (const from of [top - 29, top - 19, top - 9]) await warm.processEvent(mskEvent(near(from)));
    const identity = unpackIdentity((await fenceOf(settings, 6))[IDENTITY_ATTRIBUTE]);
    expect(identity?.fenceRecord.offset).toBe(top);
    expect(identity?.recentStarts.map((s) => s.offset)).toEqual([top - 29, top - 19, top - 9]);
    expect(await outcomeOf(processorFor(settings), near(top - 29))).toMatchObject({ duplicatesByOffset: 10 });
    expect(await outcomeOf(processorFor(settings), near(top - 29, 'other'))).toMatch(/OffsetsWentBackwards/);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#6': range(top - 29, 30) });
  });

  it('L2: a value in `identity` that is not a packed identity (a string, a truncated one, another format) beside the maps is ignored: the maps judge', async () => {
    const settings = settingsFor();
    await deployedFor(settings).processEvent(mskEvent(orderRecords(7, 0, 10)));
    await deployedFor(settings).processEvent(mskEvent(orderRecords(7, 10, 10)));
    const real = packIdentity({
      fenceRecord: printOf(orderRecords(7, 19, 1)[0]!),
      batchStart: printOf(orderRecords(7, 10, 1)[0]!),
      recentStarts: [printOf(orderRecords(7, 10, 1)[0]!)],
    })!;
    for (const forged of [
      'identity',
      real.subarray(0, real.byteLength - 1),
      Buffer.from([2, ...real.subarray(1)]),
    ]) {
      await doc().send(
        new UpdateCommand({
          TableName: res.table,
          Key: fenceKey(settings, 7),
          UpdateExpression: 'SET #identity = :forged',
          ExpressionAttributeNames: { '#identity': IDENTITY_ATTRIBUTE },
          ExpressionAttributeValues: { ':forged': forged },
        }),
      );
      expect(await outcomeOf(processorFor(settings), orderRecords(7, 0, 10))).toMatchObject({
        duplicatesByOffset: 10,
      });
      expect(await outcomeOf(processorFor(settings), orderRecords(7, 0, 10, 'other'))).toMatch(
        /OffsetsWentBackwards/,
      );
    }
  });
});

describe('redelivery after partial progress', () => {
  it('P5: a crash after the first chunk of a batch committed a packed identity, and the mapping’s retry: the staged chunk is a proven redelivery, the rest is staged once', async () => {
    // Claims in the transaction and 8 items a transaction: the batch of 20 takes several chunks.
    const settings = settingsIn(res, 'fid', {
      transform: 'passthrough',
      claimWrite: 'in-transaction',
      maxTransactionItems: 8,
    });
    await processorFor(settings).processEvent(mskEvent(orderRecords(8, 0, 10)));
    const batch = mskEvent(orderRecords(8, 10, 20));
    const crashed = await processorFor(settings, { hooks: crashAt('after-transaction') })
      .processEvent(batch)
      .catch((error: unknown) => error);
    expect(crashed).toBeInstanceOf(Error);
    const partial = await fenceOf(settings, 8);
    const identity = unpackIdentity(partial[IDENTITY_ATTRIBUTE]);
    expect(identity?.batchStart.offset).toBe(10);
    expect(partial.stagedOffset).toBeGreaterThan(10);
    expect(partial.stagedOffset).toBeLessThan(29);
    const retried = await processorFor(settings).processEvent(batch);
    expect(retried.partitions[0]).toMatchObject({
      stagedOffset: 29,
      duplicatesByOffset: (partial.stagedOffset as number) - 9,
    });
    // A split retry from inside the staged part, and the whole batch again: redeliveries.
    expect(await outcomeOf(processorFor(settings), orderRecords(8, 12, 18))).toMatchObject({
      duplicatesByOffset: 18,
    });
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#8': range(0, 30) });
  });
});

describe('an upgrade from the previous release', () => {
  it('end-to-end 1: previous release (maps, packed ring, format-1 inline entries), this release with its gate shut (the older forms, entries as items), its begin, an hour, the gate open (packed identity, format-2 entries, a move into items without MD5): every rewind judged, status counts each file once, one checkpoint commits every record once and cleanup leaves nothing', async () => {
    const settings = settingsFor();
    const p = 9;
    const clock = new ManualClock(Date.now());
    const deployed = () => deployedFor(settings, { clock });
    // The previous release: its first staging an item (the fence created by this release's writer would be the
    // same), then two batches inline in format 1, the ring carried forward as it reads it.
    await deployed().processEvent(mskEvent(orderRecords(p, 0, 10)));
    let fence = await fenceOf(settings, p);
    const ring0 = unpackRing(fence[RING_ATTRIBUTE])!;
    expect(ring0.map((s) => s.offset)).toEqual([0]);
    await previousReleaseStage(settings, p, orderRecords(p, 10, 10), 9, ring0, 'inline');
    await previousReleaseStage(
      settings,
      p,
      orderRecords(p, 20, 10),
      19,
      [...ring0, printOf(orderRecords(p, 10, 1)[0]!)],
      'inline',
    );
    // This release, its gate shut: the older forms, whole digests (readable by the previous release).
    await deployed().processEvent(mskEvent(orderRecords(p, 30, 10)));
    fence = await fenceOf(settings, p);
    expect(identityAttributes(fence)).toEqual(['fenceRecord', 'batchStart', RING_ATTRIBUTE]);
    expect(unpackRing(fence[RING_ATTRIBUTE])!.map((s) => s.offset)).toEqual([0, 10, 20, 30]);
    expect(inlineNames(fence)).toEqual(['e:19:output', 'e:29:output']);
    expect(await outcomeOf(deployed(), orderRecords(p, 10, 10))).toMatchObject({ duplicatesByOffset: 10 });
    // This release's begin, then the grace period: a new container's gate opens.
    expect((await coordinatorFor(settings, { clock }).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { [`orders#${p}`]: range(0, 40) });
    clock.advance(INLINE_GRACE_MS);
    const open = deployed();
    let next = 40;
    for (; next < 60; next += 10) await open.processEvent(mskEvent(orderRecords(p, next, 10)));
    fence = await fenceOf(settings, p);
    expect(identityAttributes(fence)).toEqual([IDENTITY_ATTRIBUTE]);
    expect(unpackIdentity(fence[IDENTITY_ATTRIBUTE])?.recentStarts.map((s) => s.offset)).toEqual([
      0, 10, 20, 30, 40, 50,
    ]);
    expect(await outcomeOf(deployed(), orderRecords(p, 20, 10))).toMatchObject({ duplicatesByOffset: 10 });
    expect(await outcomeOf(deployed(), orderRecords(p, 20, 10, 'regenerated'))).toMatch(
      /OffsetsWentBackwards/,
    );
    // One-record batches until a chunk moves the inline (format 2) entries into items.
    let held = inlineNames(fence);
    expect(held.length).toBeGreaterThan(0);
    for (let guard = 0; guard < 200; guard++, next++) {
      await open.processEvent(mskEvent(orderRecords(p, next, 1)));
      fence = await fenceOf(settings, p);
      const now = inlineNames(fence);
      if (now.length === 0 && held.length > 0) break;
      held = now;
    }
    next++;
    expect(inlineNames(fence)).toEqual([]);
    // The entries the move took out of the fence (format 2 since the gate opened) are items without an MD5; the
    // format-1 ones of the previous release were cleaned by the checkpoint.
    const items = await entryItemsOf(res, settings, p);
    const moved = items.filter((item) => held.includes(`e:${String(item.lastOffset)}:output`));
    expect(moved.length).toBe(held.length);
    expect(moved.every((item) => item.md5 === undefined)).toBe(true);
    await open.processEvent(mskEvent(orderRecords(p, next, 5)));
    next += 5;
    expect(inlineBytesIn(await fenceOf(settings, p))).toBeGreaterThan(0);
    const status = await readLedgerStatus({
      dynamodb: res.clients.dynamodb,
      table: res.table,
      pipeline: settings.pipelineId,
      clock,
    });
    const partition = status.partitions.find((s) => s.topic === 'orders' && s.partition === p)!;
    expect(partition.uncommittedRecords).toBe(next - 40);
    expect((await coordinatorFor(settings, { clock }).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { [`orders#${p}`]: range(0, next) });
    expect(await entryItemsOf(res, settings, p)).toEqual([]);
    expect(inlineNames(await fenceOf(settings, p))).toEqual([]);
  }, 180_000);
});
