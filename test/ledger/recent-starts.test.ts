/**
 * The fence's ring of recent batch starts, packed into one binary attribute (shared/ledger/recent-starts.ts), the
 * form a processor writes while its gate is shut (processor/inline-gate.ts; once open, the whole identity is
 * packed: fence-identity.test.ts): it round-trips exactly, a value that does not unpack counts as no ring (the ring
 * is advisory), a fence of the release before the packing is still read, and the fence item a staging write leaves
 * stays small enough that a write without inline entries costs one unit.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import { readFence } from '../../shared/ledger/fence-reads.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import { inlineBytesOf } from '../../shared/ledger/inline-entries.ts';
import {
  LEGACY_RING_ATTRIBUTE,
  packRing,
  RING_ATTRIBUTE,
  unpackRing,
} from '../../shared/ledger/recent-starts.ts';
import { RECENT_STARTS, type RecordFingerprint } from '../../shared/ledger/records.ts';
import { recordDigest } from '../../shared/processor/evaluate.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { ledgerItem } from '../support/legacy-fence.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('ring');
});

const print = (offset: number, timestamp = 1_764_374_400_000 + offset): RecordFingerprint => ({
  offset,
  timestamp,
  digest: recordDigest({ rawKey: `k${offset}`, rawValue: `v${offset}` }),
});

describe('packing', () => {
  it('round-trips a full ring exactly: offsets up to the largest safe integer, timestamps of any sign', () => {
    const starts = [
      print(0, -1),
      print(1, 0),
      ...Array.from({ length: RECENT_STARTS - 3 }, (_, i) => print(500 * (i + 1))),
      print(Number.MAX_SAFE_INTEGER, 1.5),
    ];
    const packed = packRing(starts);
    expect(packed?.byteLength).toBe(48 * RECENT_STARTS);
    expect(unpackRing(packed)).toEqual(starts);
  });

  it('keeps the list form for a start it cannot pack: a digest that is not a SHA-256 in base64url, a negative offset', () => {
    expect(packRing([print(1), { offset: 2, digest: 'd2', timestamp: 0 }])).toBeUndefined();
    const digest = print(3).digest;
    expect(packRing([{ offset: 3, digest: `${digest}=`, timestamp: 0 }])).toBeUndefined();
    expect(packRing([{ ...print(4), offset: -1 }])).toBeUndefined();
  });

  it('reads no ring from a value that is not one', () => {
    expect(unpackRing(new Uint8Array(47))).toBeUndefined();
    expect(unpackRing('ring')).toBeUndefined();
    expect(unpackRing([print(1)])).toBeUndefined();
    const tooLarge = Buffer.alloc(48);
    tooLarge.writeBigUInt64BE(2n ** 63n);
    expect(unpackRing(tooLarge)).toBeUndefined();
  });
});

describe('on the fence item', () => {
  const settingsFor = () => settingsIn(res, 'ring', { transform: 'passthrough', idempotencyKey: 'none' });

  /** A deployed processor before its gate opened (no checkpoint began: the head notes nothing). */
  const gateShut = (settings: ReturnType<typeof settingsFor>) =>
    createProcessor({ settings, clients: res.clients, inlineEntries: 'after-coordinator-upgrade' });

  async function stageBatches(count: number) {
    const settings = settingsFor();
    const processor = gateShut(settings);
    for (let batch = 0; batch < count; batch++)
      await processor.processEvent(mskEvent(orderRecords(0, batch * 10, 10)));
    const key = fenceKeys.fence(settings.pipelineId, 'orders', 0);
    return { settings, key, item: (await ledgerItem(res, key))! };
  }

  it('a staging write leaves the ring packed and no list; the fence reads back with every start', async () => {
    const { settings, item } = await stageBatches(RECENT_STARTS + 2);
    expect(item[LEGACY_RING_ATTRIBUTE]).toBeUndefined();
    expect((item[RING_ATTRIBUTE] as Uint8Array).byteLength).toBe(48 * RECENT_STARTS);
    const fence = await readFence(
      { doc: ledgerDocumentClient(res.clients.dynamodb), table: res.table },
      settings.pipelineId,
      'orders',
      0,
    );
    const starts = fence.identity?.recentStarts ?? [];
    expect(starts.map((s) => s.offset)).toEqual(
      Array.from({ length: RECENT_STARTS }, (_, i) => (i + 2) * 10),
    );
    expect(fence.identity?.batchStart).toEqual(starts.at(-1));
  });

  it('the fence item without inline entries weighs under 1 KB with a full ring: one write unit', async () => {
    const { item } = await stageBatches(RECENT_STARTS + 1);
    const own = Object.entries(item).filter(([name]) => !name.startsWith('e:'));
    const bytes = own.reduce((sum, [name, value]) => sum + inlineBytesOf(name, value), 0);
    expect(bytes).toBeLessThan(1024);
  });

  it('a fence of the release before the packing (the list, no ring) is read with its ring, and the next write packs it', async () => {
    const { settings, key, item } = await stageBatches(3);
    const doc = ledgerDocumentClient(res.clients.dynamodb);
    const listed = unpackRing(item[RING_ATTRIBUTE])!;
    await doc.send(
      new UpdateCommand({
        TableName: res.table,
        Key: key,
        UpdateExpression: 'SET #list = :list REMOVE #ring',
        ExpressionAttributeNames: { '#list': LEGACY_RING_ATTRIBUTE, '#ring': RING_ATTRIBUTE },
        ExpressionAttributeValues: { ':list': listed },
      }),
    );
    const at = { doc, table: res.table };
    expect((await readFence(at, settings.pipelineId, 'orders', 0)).identity?.recentStarts).toEqual(listed);
    await gateShut(settings).processEvent(mskEvent(orderRecords(0, 30, 10)));
    const after = (await ledgerItem(res, key))!;
    expect(after[LEGACY_RING_ATTRIBUTE]).toBeUndefined();
    expect(unpackRing(after[RING_ATTRIBUTE])?.map((s) => s.offset)).toEqual([0, 10, 20, 30]);
  });

  it('a ring that does not unpack counts as none: the fence keeps its identity, with an empty ring', async () => {
    const { settings, key } = await stageBatches(2);
    const doc = ledgerDocumentClient(res.clients.dynamodb);
    await doc.send(
      new UpdateCommand({
        TableName: res.table,
        Key: key,
        UpdateExpression: 'SET #ring = :bad',
        ExpressionAttributeNames: { '#ring': RING_ATTRIBUTE },
        ExpressionAttributeValues: { ':bad': new Uint8Array(50) },
      }),
    );
    const fence = await readFence({ doc, table: res.table }, settings.pipelineId, 'orders', 0);
    expect(fence.identity?.fenceRecord.offset).toBe(19);
    expect(fence.identity?.recentStarts).toEqual([]);
  });
});
