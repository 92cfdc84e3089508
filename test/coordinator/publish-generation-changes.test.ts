/**
 * What a checkpoint's snapshot changes, from the manifest log alone when no row of a file is cut (no Parquet is
 * read: the S3 client refuses every call): a generation staged but not switched stays out; its switch adds its
 * files and removes the live files it hides whole, an `overwrite`; a file the log says is in but the parent no
 * longer holds, or one the parent holds though no checkpoint before showed it, stops the publish in one line; and a
 * checkpoint that does not switch reads only its own manifest and those of the switches the ledger lists.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import {
  type ChangeParts,
  checkpointChanges,
  TableSwitchUnattributedError,
} from '../../shared/coordinator/publish/generation-changes.ts';
import { publishedTable } from '../../shared/coordinator/publish/target.ts';
import { tableLayout } from '../../shared/iceberg/append.ts';
import type { GenerationSwitch } from '../../shared/sink/generation-switch.ts';
import type { Manifest, ManifestFile } from '../../shared/sink/manifest.ts';

const PIPELINE = 'orders-pl';
const layout = tableLayout(
  publishedTable({
    location: 's3://b/t',
    columns: [{ name: 'n', type: 'long', nullable: false }],
    timePartitioning: 'hour',
  }),
);

const pad = (n: number) => String(n).padStart(20, '0');

function file(lane: string, first: number, last: number): ManifestFile {
  return {
    key: `${PIPELINE}/final/output/dt=2026-03-14/hour=07/${lane}+0+${pad(first)}-${pad(last)}.parquet`,
    stream: 'output',
    topic: lane,
    partition: 0,
    firstOffset: first,
    lastOffset: last,
    recordCount: last - first + 1,
    bytes: 100,
    sha256: 'a'.repeat(64),
    format: 'parquet',
  };
}

function manifest(checkpointId: number, files: ManifestFile[], generations?: GenerationSwitch[]): Manifest {
  return {
    version: 1,
    pipeline: PIPELINE,
    checkpointId,
    previousCheckpointId: checkpointId - 1,
    cut: {},
    previousCut: {},
    committedAt: '2026-03-14T07:00:00.000Z',
    files,
    ...(generations ? { generations } : {}),
  };
}

const live = file('orders', 0, 9);
const generation = file('orders~g1', 0, 9);
const later = file('orders', 10, 19);
const LOG = [
  manifest(1, [live]),
  manifest(2, [generation]),
  manifest(3, [], [{ generation: 1, ranges: [{ lane: 'orders', partition: 0, from: 0, to: 9 }] }]),
  manifest(4, [later]),
];

const refusingS3 = {
  send: () => Promise.reject(new Error('no S3 call is expected: no file is cut')),
} as unknown as S3Client;

function parts(): ChangeParts & { reads: number[] } {
  const reads: number[] = [];
  return {
    pipelineId: PIPELINE,
    bucket: 'bkt',
    s3: refusingS3,
    manifests: {
      read: async (id: number) => {
        reads.push(id);
        return LOG[id - 1];
      },
    },
    log: new Map(),
    reads,
  };
}

const path = (listed: ManifestFile) => `s3://bkt/${listed.key}`;

describe('checkpointChanges', () => {
  it('leaves a generation not yet switched to out of the table: a plain append of the live files', async () => {
    const p = parts();
    const out = await checkpointChanges(p, 2, layout, []);
    expect(out.dataFiles).toEqual([]);
    expect(out.changes).toBeUndefined();
    expect(out.switches).toEqual([]);
    expect(out.left.map((left) => left.key)).toEqual([generation.key]);
    expect(p.reads).toEqual([2]);
  });

  it("adds the switched generation's files and removes the live files it hides whole, as an overwrite", async () => {
    const p = parts();
    const out = await checkpointChanges(p, 3, layout, []);
    expect(out.dataFiles.map((f) => f.path)).toEqual([path(generation)]);
    expect(out.lanes).toEqual(['orders~g1']);
    expect(out.switches).toEqual([3]);
    const changes = await out.changes?.(new Map([[path(live), [0]]]));
    expect(changes).toEqual({
      dataFiles: out.dataFiles,
      removed: [path(live)],
      positionDeletes: [],
      operation: 'overwrite',
    });
    expect([...new Set(p.reads)].sort()).toEqual([1, 2, 3]);
  });

  it('refuses in one line when the parent no longer holds a file the switch hides, or holds one no checkpoint showed', async () => {
    const out = await checkpointChanges(parts(), 3, layout, []);
    const rewritten = await out.changes?.(new Map()).catch((error: unknown) => error);
    expect(rewritten).toBeInstanceOf(TableSwitchUnattributedError);
    expect((rewritten as Error).message).toMatch(
      /^checkpoint 3 hides every row of \S+orders\+0\+\S+ \(checkpoint 1\), which the table no longer holds as published/,
    );
    const foreign = await out
      .changes?.(
        new Map([
          [path(live), [0]],
          [path(generation), [0]],
        ]),
      )
      .catch((error: unknown) => error);
    expect(foreign).toBeInstanceOf(TableSwitchUnattributedError);
    expect((foreign as Error).message).toMatch(
      /the table holds \S+orders~g1\S+, which no checkpoint before it shows/,
    );
  });

  it('after a switch, reads only its own manifest and the switches the ledger lists; without the list, the log', async () => {
    const listed = parts();
    const out = await checkpointChanges(listed, 4, layout, [3]);
    expect(out.dataFiles.map((f) => f.path)).toEqual([path(later)]);
    expect(out.changes).toBeUndefined();
    expect(out.switches).toEqual([3]);
    expect([...new Set(listed.reads)].sort()).toEqual([3, 4]);

    const unlisted = parts();
    const again = await checkpointChanges(unlisted, 4, layout, undefined);
    expect(again.dataFiles).toEqual(out.dataFiles);
    expect(again.switches).toEqual([3]);
    expect([...new Set(unlisted.reads)].sort()).toEqual([1, 2, 3, 4]);
  });
});
