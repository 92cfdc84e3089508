/**
 * The fence's identity packed into one binary attribute (shared/ledger/fence-identity.ts): it round-trips but for
 * the digests, cut to 16 bytes, which still tell a redelivered record from another; what does not pack is written
 * in the form of the release before, and what does not unpack exactly is no identity; on the fence item, a
 * processor whose gate is open writes it alone, judges redeliveries and rewinds by it, and a fence with a full ring
 * and eight inline entries stays under the kilobyte a write unit bills.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import {
  IDENTITY_ATTRIBUTE,
  packIdentity,
  sameDigest,
  unpackIdentity,
} from '../../shared/ledger/fence-identity.ts';
import { readFence } from '../../shared/ledger/fence-reads.ts';
import { inlineBytesOf } from '../../shared/ledger/inline-entries.ts';
import { RING_ATTRIBUTE } from '../../shared/ledger/recent-starts.ts';
import { type FenceIdentity, RECENT_STARTS, type RecordFingerprint } from '../../shared/ledger/records.ts';
import { recordDigest } from '../../shared/processor/evaluate.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { fenceOf, inlineNames } from '../support/inline.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('identity');
});

const digestOf = (text: string) => recordDigest({ rawKey: text, rawValue: `value of ${text}` });
const print = (offset: number, timestamp = 1_796_553_718_000 + offset): RecordFingerprint => ({
  offset,
  timestamp,
  digest: digestOf(`record ${offset}`),
});

/** The identity of a fence at `fence` whose last batches started at `starts` (the last is the batch start). */
function identityOf(fence: number, starts: number[], at = print): FenceIdentity {
  const recentStarts = starts.map((offset) => at(offset));
  return { fenceRecord: at(fence), batchStart: recentStarts.at(-1)!, recentStarts };
}

/** Digests cut as the packed identity keeps them: the first 16 bytes. */
const cut = (p: RecordFingerprint): RecordFingerprint => ({
  ...p,
  digest: Buffer.from(p.digest, 'base64url').subarray(0, 16).toString('base64url'),
});

describe('the packed identity', () => {
  const cases: Array<[string, FenceIdentity]> = [
    ['a full ring', identityOf(99, [20, 30, 40, 50, 60, 70, 80, 90])],
    ['one start, at the fence', identityOf(5, [5])],
    [
      'offsets near the largest safe integer',
      identityOf(2 ** 53 - 1, [2 ** 53 - 30, 2 ** 53 - 20], (o) => print(o, 7)),
    ],
    ['no timestamps (-1) and a start at offset 0', identityOf(7, [0, 4], (o) => print(o, -1))],
    ['timestamps that go backwards', identityOf(30, [10, 20], (o) => print(o, 1_000_000 - o * 1_000))],
  ];
  for (const [name, identity] of cases) {
    it(`round-trips, digests cut to 16 bytes: ${name}`, () => {
      const back = unpackIdentity(packIdentity(identity));
      expect(back).toEqual({
        fenceRecord: cut(identity.fenceRecord),
        batchStart: cut(identity.batchStart),
        recentStarts: identity.recentStarts.map(cut),
      });
      // Packing what was read back gives the same bytes: a fence carries its ring forward unchanged.
      expect(packIdentity(back!)).toEqual(packIdentity(identity));
    });
  }

  it('takes under 200 bytes with a full ring, where the maps and the ring of the release before take 570', () => {
    const identity = identityOf(
      1_000_499,
      [996_000, 996_500, 997_000, 997_500, 998_000, 998_500, 999_000, 1_000_000],
    );
    expect(packIdentity(identity)!.byteLength).toBeLessThan(200);
  });

  it('does not pack what it cannot hold exactly: the form of the release before is written instead', () => {
    const good = identityOf(30, [10, 20]);
    expect(packIdentity({ ...good, batchStart: print(10) })).toBeUndefined();
    expect(packIdentity({ ...good, recentStarts: [] })).toBeUndefined();
    expect(packIdentity({ ...good, recentStarts: [print(40)], batchStart: print(40) })).toBeUndefined();
    expect(packIdentity(identityOf(30, [10, 20], (o) => print(o, 2 ** 53)))).toBeUndefined();
    expect(packIdentity(identityOf(30, [10, 20], (o) => print(o, 0.5)))).toBeUndefined();
    expect(packIdentity({ ...good, fenceRecord: { ...print(30), digest: 'not a digest' } })).toBeUndefined();
    expect(packIdentity(identityOf(99, [1, 2, 3, 4, 5, 6, 7, 8, 9]))).toBeUndefined();
  });

  it('unpacks nothing that is not exactly one: truncated, extended, another format, no start, more than a ring holds, a start below offset 0', () => {
    const packed = Buffer.from(packIdentity(identityOf(30, [10, 20]))!);
    expect(unpackIdentity(packed.subarray(0, packed.byteLength - 1))).toBeUndefined();
    expect(unpackIdentity(Buffer.concat([packed, Buffer.from([0])]))).toBeUndefined();
    expect(unpackIdentity(Buffer.from([2, ...packed.subarray(1)]))).toBeUndefined();
    expect(unpackIdentity('identity')).toBeUndefined();
    // Format, fence offset 30, timestamp 0, its digest, then the count of starts.
    const head = [1, 30, 0, ...Buffer.alloc(16)];
    const start = (below: number) => [below, 0, ...Buffer.alloc(16)];
    expect(unpackIdentity(Buffer.from([...head, 1, ...start(0)]))).toBeDefined();
    expect(unpackIdentity(Buffer.from([...head, 0]))).toBeUndefined();
    expect(
      unpackIdentity(Buffer.from([...head, RECENT_STARTS + 1, ...Array(9).fill(start(0)).flat()])),
    ).toBeUndefined();
    expect(unpackIdentity(Buffer.from([...head, 1, ...start(31)]))).toBeUndefined();
  });

  it('tells records apart by 16 bytes of their digest: the same record matches its cut digest, another does not', () => {
    const a = digestOf('a');
    const b = digestOf('b');
    const cutA = cut({ offset: 0, timestamp: 0, digest: a }).digest;
    expect(sameDigest(a, a)).toBe(true);
    expect(sameDigest(a, cutA)).toBe(true);
    expect(sameDigest(cutA, a)).toBe(true);
    expect(sameDigest(b, cutA)).toBe(false);
    expect(sameDigest(a, b)).toBe(false);
    expect(sameDigest(cutA, cut({ offset: 0, timestamp: 0, digest: b }).digest)).toBe(false);
    expect(sameDigest(a, 'not a digest')).toBe(false);
    expect(sameDigest(a, Buffer.from(a, 'base64url').subarray(0, 15).toString('base64url'))).toBe(false);
  });
});

describe('on the fence item', () => {
  const settingsFor = () => settingsIn(res, 'id', { transform: 'passthrough', idempotencyKey: 'none' });

  it('a processor whose gate is open writes the identity packed, alone, and reads it back at the staged offset', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    for (let batch = 0; batch < RECENT_STARTS + 2; batch++)
      await processor.processEvent(mskEvent(orderRecords(0, batch * 10, 10)));
    const item = await fenceOf(res, settings, 0);
    for (const legacy of ['fenceRecord', 'batchStart', RING_ATTRIBUTE, 'recentStarts'])
      expect(item[legacy]).toBeUndefined();
    expect(item[IDENTITY_ATTRIBUTE]).toBeInstanceOf(Uint8Array);
    const fence = await readFence(
      { doc: ledgerDocumentClient(res.clients.dynamodb), table: res.table },
      settings.pipelineId,
      'orders',
      0,
    );
    expect(fence.identity?.fenceRecord.offset).toBe(fence.stagedOffset);
    expect(fence.identity?.recentStarts.map((s) => s.offset)).toEqual(
      Array.from({ length: RECENT_STARTS }, (_, i) => (i + 2) * 10),
    );
  });

  it('L2: by the cut digests, a batch redelivered two back is a redelivery and one with other bytes at a remembered start stops', async () => {
    const settings = settingsFor();
    const processor = () => createProcessor({ settings, clients: res.clients });
    for (let batch = 0; batch < 3; batch++)
      await processor().processEvent(mskEvent(orderRecords(1, batch * 10, 10)));
    const again = await processor().processEvent(mskEvent(orderRecords(1, 10, 10)));
    expect(again.partitions[0]).toMatchObject({ duplicatesByOffset: 10, chunks: 0, stagedOffset: 29 });
    await expect(
      processor().processEvent(mskEvent(orderRecords(1, 10, 10, 'another generation'))),
    ).rejects.toThrow(/OffsetsWentBackwards|not the one staged there/);
  });

  it('the fence item with a full ring and eight inline entries of 500 records weighs under 1 KB: one write unit', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    let item: Record<string, unknown> = {};
    for (let batch = 0; inlineNames(item).length < 8; batch++) {
      await processor.processEvent(mskEvent(orderRecords(2, batch * 500, 500)));
      item = await fenceOf(res, settings, 2);
    }
    expect(unpackIdentity(item[IDENTITY_ATTRIBUTE])?.recentStarts).toHaveLength(RECENT_STARTS);
    const bytes = Object.entries(item).reduce((sum, [name, value]) => sum + inlineBytesOf(name, value), 0);
    expect(bytes).toBeLessThan(1024);
  });
});
