/**
 * Zombie publishes (a publish invocation that timed out, or a Step Functions retry's predecessor, still running)
 * against the live publisher, with table maintenance between them: each committed checkpoint is one snapshot of
 * main, each row once, whatever evidence maintenance leaves in the table. Against DynamoDB Local and the local S3
 * server, the table read back by icebird.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { publishedCheckpointProperty } from '../../shared/coordinator/publish/target.ts';
import type { Catalog, TableState } from '../../shared/iceberg/catalog.ts';
import type { Snapshot, TableMetadata } from '../../shared/iceberg/table-metadata.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { commitNext, type PublishSetup, publishSetup, rowsBack } from '../support/publish.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubzomb');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

/** The `n` of the rows of the first `checkpoints` checkpoints of three rows per partition. */
function rowsOf(checkpoints: number): number[] {
  const n = Array.from({ length: checkpoints * 3 }, (_, i) => i);
  return [...n, ...n.map((i) => 1000 + i)].sort((a, b) => a - b);
}

async function stateOf(catalog: Catalog): Promise<TableState> {
  const state = await catalog.load();
  if (!state) throw new Error('the table has no metadata');
  return state;
}

/**
 * Maintenance by another engine: a compaction that changed nothing (a `replace` snapshot over main's manifest
 * list), every older snapshot expired, and its metadata rewrite dropping `dropped` from the table's properties.
 */
async function compactExpireAndDrop(catalog: Catalog, dropped: string): Promise<void> {
  const state = await stateOf(catalog);
  const { metadata } = state;
  const head = metadata.snapshots.find(
    (snapshot) => snapshot['snapshot-id'] === metadata['current-snapshot-id'],
  );
  if (!head) throw new Error('the table has no head');
  const sequence = metadata['last-sequence-number'] + 1;
  const id = 7_100_000_000_000_000n + BigInt(sequence);
  const compaction: Snapshot = {
    ...head,
    'snapshot-id': id,
    'parent-snapshot-id': head['snapshot-id'],
    'sequence-number': sequence,
    'timestamp-ms': metadata['last-updated-ms'] + 1,
    summary: { operation: 'replace' },
  };
  const properties = Object.fromEntries(Object.entries(metadata.properties).filter(([k]) => k !== dropped));
  const next: TableMetadata = {
    ...metadata,
    properties,
    'last-sequence-number': sequence,
    'last-updated-ms': compaction['timestamp-ms'],
    'current-snapshot-id': id,
    refs: { main: { 'snapshot-id': id, type: 'branch' } },
    snapshots: [compaction],
  };
  expect(await catalog.commit(state, next)).not.toBe('conflict');
}

/** `s`'s catalog whose commits wait at the swap until `release`; `arrived` resolves at the first. */
function gatedCatalog(s: PublishSetup): { catalog: Catalog; arrived: Promise<void>; release: () => void } {
  let arrive!: () => void;
  const arrived = new Promise<void>((resolve) => {
    arrive = resolve;
  });
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const catalog: Catalog = {
    load: () => s.catalog.load(),
    commit: async (expected, next) => {
      arrive();
      await gate;
      return s.catalog.commit(expected, next);
    },
  };
  return { catalog, arrived, release };
}

describe('a zombie publish never appends a checkpoint the ledger records as published', () => {
  // A zombie of checkpoint 2 waits at its swap while the live publisher publishes 2 and 3 and records them;
  // maintenance then compacts, expires every older snapshot and (another engine's metadata rewrite, which the
  // rollback check accepts as ordinary) drops the published-checkpoint property. The zombie's swap meets the
  // conflict and its reload finds no summary and no property naming 2: only the ledger's record, read again after
  // the conflict and before the next swap, says 2 is in, and the zombie stops there instead of rebasing 2 onto the
  // head (2's rows twice).
  it('a zombie of checkpoint 2 released after 2 and 3 were recorded and the table lost their evidence appends nothing', async () => {
    const s = publishSetup(res, 'pz');
    await commitNext(res, s);
    await publishCheckpoint(s.parts, 1);
    await commitNext(res, s);
    const gated = gatedCatalog(s);
    const zombie = publishCheckpoint(
      { ...s.parts, target: { ...s.parts.target, catalog: gated.catalog } },
      2,
    );
    await gated.arrived;

    await commitNext(res, s);
    const live = await publishCheckpoint(s.parts, 3);
    expect(live.published.map((p) => [p.checkpointId, p.how])).toEqual([
      [2, 'appended'],
      [3, 'appended'],
    ]);
    await compactExpireAndDrop(s.catalog, publishedCheckpointProperty(s.settings.pipelineId));
    // The live path is sound on this table: the mark's snapshot is judged held, and nothing is appended.
    expect((await publishCheckpoint(s.parts, 3)).published).toEqual([]);

    gated.release();
    const late = await zombie;
    expect(late.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'recorded']]);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(3));
  });

  // Sound: the same race with the property kept. The zombie's reload finds checkpoint 2 by the property (its
  // snapshot expired) and records nothing new, the ledger's record unchanged.
  it('a zombie of checkpoint 2 released after 2 and 3 were published and their snapshots expired finds 2 by the property', async () => {
    const s = publishSetup(res, 'pz');
    await commitNext(res, s);
    await publishCheckpoint(s.parts, 1);
    await commitNext(res, s);
    const gated = gatedCatalog(s);
    const zombie = publishCheckpoint(
      { ...s.parts, target: { ...s.parts.target, catalog: gated.catalog } },
      2,
    );
    await gated.arrived;
    await commitNext(res, s);
    await publishCheckpoint(s.parts, 3);
    const recorded = await s.parts.snapshots.read(2);
    await compactExpireAndDrop(s.catalog, 'no-such-property');

    gated.release();
    const late = await zombie;
    expect(late.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'found']]);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(3));
    expect(await s.parts.snapshots.read(2)).toEqual(recorded);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(3);
  });
});
