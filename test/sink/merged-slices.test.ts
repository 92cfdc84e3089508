/**
 * Readers of committed output over merged final objects (C5, C7): a manifest entry with `sliceStart` is a slice of
 * a merged object (`shared/sink/entry-bytes.ts`). Merged objects and manifests are built by hand
 * (`test/support/merged.ts`) and written to the real local S3 server; the committed reader, `eos verify` and
 * `readFinalRows` are run on them, with each defect a reader must refuse or report.
 */
import { DeleteObjectCommand, GetObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import {
  bucketByteSource,
  EntryBytesError,
  getRange,
  readEntryBytes,
  splitSlices,
  tilingProblems,
} from '../../shared/sink/entry-bytes.ts';
import type { KeyedObjects } from '../../shared/sink/folder-objects.ts';
import { finalObjectKey } from '../../shared/sink/layout.ts';
import type { ManifestFile } from '../../shared/sink/manifest.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { CommittedFileError, readCommitted } from '../../shared/sink/reader.ts';
import { listKeys, type ProblemKind, readFinalRows, verifySink } from '../../shared/sink/verify.ts';
import { freshResources, uniqueName } from '../support/aws.ts';
import {
  buildMerged,
  type MergedObject,
  mergedKey,
  putManifest,
  putObject,
  sha256Of,
} from '../support/merged.ts';

let clients: AwsClients;
let bucket: string;

beforeAll(async () => {
  ({ clients, bucket } = await freshResources('merged'));
});

/** A client of its own that notes every GetObject it sends (key and Range). */
function countingS3(): { s3: S3Client; gets: { key: string; range?: string }[] } {
  const gets: { key: string; range?: string }[] = [];
  const { s3 } = createAwsClients();
  s3.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'GetObjectCommand') {
        const input = args.input as { Key: string; Range?: string };
        gets.push({ key: input.Key, ...(input.Range === undefined ? {} : { range: input.Range }) });
      }
      return next(args);
    },
    { step: 'initialize' },
  );
  return { s3, gets };
}

/** A bucket's objects as verify reads them, counting the reads per key. */
function countingObjects(): { objects: KeyedObjects; reads: Map<string, number> } {
  const reads = new Map<string, number>();
  const objects: KeyedObjects = {
    list: (prefix) => listKeys(clients.s3, bucket, prefix),
    get: async (key) => {
      reads.set(key, (reads.get(key) ?? 0) + 1);
      return getBytes(clients.s3, bucket, key);
    },
  };
  return { objects, reads };
}

const put = (key: string, body: Buffer | string) => putObject(clients.s3, bucket, key, body);
const write = (merged: MergedObject) => put(merged.key, merged.body);
const kinds = (problems: readonly { kind: ProblemKind }[]) =>
  [...new Set(problems.map((p) => p.kind))].sort();

/**
 * Checkpoint 1: a merged gzip output object of shard 0 (partitions 0 and 1), one of shard 1 (partition 2) and a
 * merged plain dead-letter object (partition 0). Checkpoint 2: a whole object of partition 0 and a merged object
 * (partition 1).
 */
async function layout() {
  const pipeline = uniqueName('pl');
  const a = buildMerged(pipeline, { stream: 'output', checkpointId: 1 }, [
    { partition: 0, offsets: [0, 1, 2] },
    { partition: 1, offsets: [0, 1] },
  ]);
  const b = buildMerged(pipeline, { stream: 'output', checkpointId: 1, shard: 1 }, [
    { partition: 2, offsets: [0, 1, 2, 3] },
  ]);
  const c = buildMerged(pipeline, { stream: 'deadletter', checkpointId: 1, gzip: false }, [
    { partition: 0, offsets: [3], extra: { error: 'poison' } },
  ]);
  const rows = encodeNdjson(
    [4, 5].map((offset) => ({ source: { topic: 'orders', partition: 0, offset }, orderId: `o0-${offset}` })),
    true,
  );
  const whole: ManifestFile = {
    key: finalObjectKey(
      pipeline,
      { stream: 'output', topic: 'orders', partition: 0, firstOffset: 4, lastOffset: 5 },
      true,
    ),
    stream: 'output',
    topic: 'orders',
    partition: 0,
    firstOffset: 4,
    lastOffset: 5,
    recordCount: 2,
    bytes: rows.bytes,
    sha256: rows.sha256,
  };
  await put(whole.key, rows.body);
  const d = buildMerged(pipeline, { stream: 'output', checkpointId: 2, attempt: 2 }, [
    { partition: 1, offsets: [2, 3] },
  ]);
  await Promise.all([a, b, c, d].map(write));
  const cut1 = { 'orders#0': 3, 'orders#1': 1, 'orders#2': 3 };
  const cut2 = { 'orders#0': 5, 'orders#1': 3, 'orders#2': 3 };
  await putManifest(clients.s3, bucket, pipeline, 1, [...a.entries, ...b.entries, ...c.entries], cut1, {});
  await putManifest(clients.s3, bucket, pipeline, 2, [whole, ...d.entries], cut2, cut1);
  return { pipeline, a, b, c, d, whole, cut1, cut2 };
}

/** One checkpoint of one merged output object over partitions 0..2, written; its manifest is the caller's. */
async function oneObject(pipeline = uniqueName('pl')) {
  const merged = buildMerged(pipeline, { stream: 'output', checkpointId: 1 }, [
    { partition: 0, offsets: [0, 1] },
    { partition: 1, offsets: [0, 1, 2] },
    { partition: 2, offsets: [0] },
  ]);
  await write(merged);
  return { pipeline, merged, cut: { 'orders#0': 1, 'orders#1': 2, 'orders#2': 0 } };
}

async function readAll(
  pipeline: string,
  s3: S3Client = clients.s3,
  stream: 'output' | 'deadletter' = 'output',
) {
  const out: string[] = [];
  for await (const { checkpointId, row } of readCommitted({ s3, bucket, pipeline, stream })) {
    const source = row.source as { partition: number; offset: number };
    out.push(`${checkpointId}:${source.partition}@${source.offset}`);
  }
  return out;
}

describe('reading a slice', () => {
  it('the local S3 server honours Range: a 206 with exactly the asked bytes, a short tail, 416 past the end', async () => {
    const { merged } = await oneObject();
    const response = await clients.s3.send(
      new GetObjectCommand({ Bucket: bucket, Key: merged.key, Range: 'bytes=5-24' }),
    );
    expect(response.ContentRange).toBe(`bytes 5-24/${merged.body.length}`);
    expect(Buffer.from(await response.Body!.transformToByteArray())).toEqual(merged.body.subarray(5, 25));
    const size = merged.body.length;
    expect(await getRange(clients.s3, bucket, merged.key, { start: 3, end: 11 })).toEqual(
      merged.body.subarray(3, 11),
    );
    expect(await getRange(clients.s3, bucket, merged.key, { start: size - 4, end: size + 10 })).toEqual(
      merged.body.subarray(size - 4),
    );
    expect(await getRange(clients.s3, bucket, merged.key, { start: size + 1, end: size + 10 })).toHaveLength(
      0,
    );
    expect(await getRange(clients.s3, bucket, `${merged.key}.none`, { start: 0, end: 4 })).toBeUndefined();
  });

  it('reads a slice with one ranged GetObject of exactly its bytes, and refuses one the object is too short for', async () => {
    const { merged } = await oneObject();
    const { s3, gets } = countingS3();
    const slice = merged.entries[1]!;
    const bytes = await readEntryBytes(bucketByteSource(s3, bucket), slice);
    expect(bytes).toEqual(merged.body.subarray(slice.sliceStart, slice.sliceStart! + slice.bytes));
    expect(sha256Of(bytes!)).toBe(slice.sha256);
    expect(gets).toEqual([
      { key: merged.key, range: `bytes=${slice.sliceStart}-${slice.sliceStart! + slice.bytes - 1}` },
    ]);
    const last = merged.entries[2]!;
    await expect(
      readEntryBytes(bucketByteSource(s3, bucket), { ...last, bytes: last.bytes + 7 }),
    ).rejects.toThrow(EntryBytesError);
    // Without ranged reads (an export folder): the whole object, cut.
    const cut = await readEntryBytes({ whole: (key) => getBytes(s3, bucket, key) }, slice);
    expect(cut).toEqual(bytes);
    await expect(readEntryBytes(bucketByteSource(s3, bucket), { ...slice, sliceStart: -1 })).rejects.toThrow(
      /not a byte position/,
    );
  });

  it('tiles and splits: a gap, an overlap, trailing bytes and a short object are told apart; a stream is cut by spans', async () => {
    const spans = [
      { start: 0, end: 4 },
      { start: 6, end: 9 },
      { start: 8, end: 12 },
    ];
    expect(tilingProblems(spans, 15).map((p) => p.kind)).toEqual(['gap', 'overlap', 'trailing']);
    expect(tilingProblems(spans.slice(0, 1), 3).map((p) => p.kind)).toEqual(['short']);
    expect(
      tilingProblems(
        [
          { start: 0, end: 4 },
          { start: 4, end: 9 },
        ],
        9,
      ),
    ).toEqual([]);
    const body = Buffer.from('abcdefghijklmnop');
    const parts: string[] = ['', ''];
    const seen = await splitSlices(
      [body.subarray(0, 3), body.subarray(3, 10), body.subarray(10)],
      [
        { start: 2, end: 5 },
        { start: 5, end: 12 },
      ],
      async (index, chunk) => {
        parts[index] += chunk.toString();
      },
    );
    expect(parts).toEqual(['cde', 'fghijkl']);
    expect(seen).toBe(16);
  });
});

describe('the committed reader over slices', () => {
  it('yields each record once, in manifest order, reading each slice with one ranged request', async () => {
    const { pipeline, a, b, d } = await layout();
    const { s3, gets } = countingS3();
    expect(await readAll(pipeline, s3)).toEqual([
      '1:0@0',
      '1:0@1',
      '1:0@2',
      '1:1@0',
      '1:1@1',
      '1:2@0',
      '1:2@1',
      '1:2@2',
      '1:2@3',
      '2:0@4',
      '2:0@5',
      '2:1@2',
      '2:1@3',
    ]);
    const merged = new Set([a.key, b.key, d.key]);
    const dataGets = gets.filter((get) => merged.has(get.key));
    expect(dataGets).toHaveLength(4);
    expect(dataGets.every((get) => get.range !== undefined)).toBe(true);
    expect(await readAll(pipeline, s3, 'deadletter')).toEqual(['1:0@3']);
  });

  const refusals: [string, (o: Awaited<ReturnType<typeof oneObject>>) => Promise<ManifestFile[]>, RegExp][] =
    [
      [
        'a slice whose key names another checkpoint',
        async ({ pipeline }) => {
          const other = buildMerged(pipeline, { stream: 'output', checkpointId: 2 }, [
            { partition: 0, offsets: [0, 1] },
          ]);
          await write(other);
          return other.entries;
        },
        /is a merged object of checkpoint 2, listed as a slice by checkpoint 1's manifest/,
      ],
      [
        'a slice of another pipeline',
        async () => {
          const other = buildMerged(uniqueName('other'), { stream: 'output', checkpointId: 1 }, [
            { partition: 0, offsets: [0, 1] },
          ]);
          await write(other);
          return other.entries;
        },
        /is not the final data key of a merged object of pipeline/,
      ],
      [
        'a slice of the other stream',
        async ({ merged }) => [{ ...merged.entries[0]!, stream: 'deadletter' }, ...merged.entries.slice(1)],
        /is a merged output object, listed as a deadletter slice/,
      ],
      [
        'overlapping slices',
        async ({ merged }) => [...merged.entries, { ...merged.entries[1]!, partition: 3 }],
        /overlap at bytes .*read twice/,
      ],
      [
        'slices with a gap',
        async ({ merged }) => [merged.entries[0]!, merged.entries[2]!],
        /leave bytes \d+-\d+ out/,
      ],
      [
        'a key listed whole and as slices',
        async ({ merged }) => [
          ...merged.entries,
          {
            ...merged.entries[0]!,
            sliceStart: undefined,
            bytes: merged.body.length,
            sha256: sha256Of(merged.body),
          },
        ],
        /is not the final data key/,
      ],
      [
        'a slice whose SHA-256 is not its bytes',
        async ({ merged }) => [
          merged.entries[0]!,
          { ...merged.entries[1]!, sha256: '0'.repeat(64) },
          merged.entries[2]!,
        ],
        /does not match its manifest/,
      ],
    ];
  for (const [what, files, message] of refusals) {
    it(`refuses ${what}`, async () => {
      const setup = await oneObject();
      const listed = await files(setup);
      await putManifest(clients.s3, bucket, setup.pipeline, 1, listed, { ...setup.cut, 'orders#3': 1 }, {});
      const read = readAll(setup.pipeline);
      await expect(read).rejects.toThrow(CommittedFileError);
      await expect(readAll(setup.pipeline)).rejects.toThrow(message);
    });
  }

  it('refuses a slice listed again by a later manifest', async () => {
    const { pipeline, a, cut2 } = await layout();
    await putManifest(clients.s3, bucket, pipeline, 3, [a.entries[0]!], cut2, cut2);
    await expect(readAll(pipeline)).rejects.toThrow(
      /is a merged object of checkpoint 1, listed as a slice by checkpoint 3/,
    );
  });
});

describe('eos verify over slices', () => {
  it('passes a correct layout, reading each merged object once', async () => {
    const { pipeline, a, b, c, d, whole } = await layout();
    const { objects, reads } = countingObjects();
    const result = await verifySink({ objects, pipeline });
    expect(result.problems).toEqual([]);
    expect(result).toMatchObject({
      ok: true,
      manifests: 2,
      files: 5,
      slices: 5,
      rows: { output: 13, deadletter: 1 },
      unlistedObjects: 0,
    });
    for (const key of [a.key, b.key, c.key, d.key, whole.key]) expect(reads.get(key), key).toBe(1);
  });

  it('finds a gap between slices (bytes no entry lists)', async () => {
    const { pipeline, merged, cut } = await oneObject();
    await putManifest(clients.s3, bucket, pipeline, 1, [merged.entries[0]!, merged.entries[2]!], cut, {});
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    expect(kinds(result.problems)).toEqual(['object-mismatch']);
    expect(result.problems[0]).toMatchObject({
      key: merged.key,
      message: expect.stringMatching(/lie in no slice/),
    });
  });

  it('finds overlapping slices', async () => {
    const { pipeline, merged, cut } = await oneObject();
    await putManifest(clients.s3, bucket, pipeline, 1, [...merged.entries, merged.entries[1]!], cut, {});
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    expect(kinds(result.problems)).toContain('listed-twice');
    const overlap = result.problems.find((p) => p.kind === 'listed-twice');
    expect(overlap).toMatchObject({ key: merged.key, message: expect.stringMatching(/lie in two slices/) });
  });

  it('finds bytes past the last slice', async () => {
    const { pipeline, merged, cut } = await oneObject();
    const extra = encodeNdjson([{ source: { topic: 'orders', partition: 9, offset: 0 } }], true).body;
    await put(merged.key, Buffer.concat([merged.body, extra]));
    await putManifest(clients.s3, bucket, pipeline, 1, merged.entries, cut, {});
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    expect(result.problems).toEqual([
      { kind: 'object-mismatch', key: merged.key, message: expect.stringMatching(/past the last slice/) },
    ]);
  });

  it('finds one slice whose SHA-256 is wrong, and only that one', async () => {
    const { pipeline, merged, cut } = await oneObject();
    const wrong = { ...merged.entries[1]!, sha256: 'f'.repeat(64) };
    await putManifest(
      clients.s3,
      bucket,
      pipeline,
      1,
      [merged.entries[0]!, wrong, merged.entries[2]!],
      cut,
      {},
    );
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    expect(result.problems).toEqual([
      {
        kind: 'object-mismatch',
        key: merged.key,
        message: expect.stringMatching(
          new RegExp(`^slice at ${wrong.sliceStart}: .* listed as ${wrong.bytes} bytes with ffffffffffff`),
        ),
      },
    ]);
  });

  it('finds a slice whose rows are not its range, and a slice past the object end', async () => {
    const { pipeline, merged, cut } = await oneObject();
    const entries = [
      merged.entries[0]!,
      { ...merged.entries[1]!, firstOffset: 1, lastOffset: 2 },
      { ...merged.entries[2]!, bytes: merged.entries[2]!.bytes + 3 },
    ];
    await putManifest(clients.s3, bucket, pipeline, 1, entries, cut, {});
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    expect(kinds(result.problems)).toEqual(['object-mismatch', 'outside-range']);
    expect(result.problems.map((p) => p.message)).toContainEqual(
      expect.stringMatching(/runs past the object's end/),
    );
    expect(result.problems.map((p) => p.message)).toContainEqual(
      expect.stringMatching(/row at offset 0 outside the listed range 1-2/),
    );
  });

  it('finds a slice whose key names another checkpoint', async () => {
    const { pipeline, merged, cut } = await oneObject();
    const other = buildMerged(pipeline, { stream: 'output', checkpointId: 2 }, [
      { partition: 3, offsets: [0] },
    ]);
    await write(other);
    await putManifest(
      clients.s3,
      bucket,
      pipeline,
      1,
      [...merged.entries, ...other.entries],
      { ...cut, 'orders#3': 0 },
      {},
    );
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    // Never read: its object is listed by no manifest it may be listed by.
    expect(kinds(result.problems)).toEqual(['foreign-key', 'unlisted-object']);
    expect(result.problems.find((p) => p.kind === 'foreign-key')).toMatchObject({
      key: other.key,
      message: expect.stringMatching(
        /merged object of checkpoint 2, listed as a slice by checkpoint 1's manifest/,
      ),
    });
  });

  it('finds a slice listed by two manifests', async () => {
    const { pipeline, a, cut2 } = await layout();
    await putManifest(clients.s3, bucket, pipeline, 3, [a.entries[1]!], cut2, cut2);
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    expect(kinds(result.problems)).toEqual(['foreign-key', 'listed-twice']);
    expect(result.problems.find((p) => p.kind === 'listed-twice')).toMatchObject({
      key: a.key,
      message: 'listed as a slice by manifest 3 and as slices by manifest 1',
    });
  });

  it('finds a slice under another pipeline, never reading it', async () => {
    const { pipeline, merged, cut } = await oneObject();
    const { merged: foreign } = await oneObject(uniqueName('other'));
    const { objects, reads } = countingObjects();
    await putManifest(
      clients.s3,
      bucket,
      pipeline,
      1,
      [...merged.entries.slice(0, 2), foreign.entries[2]!],
      cut,
      {},
    );
    const result = await verifySink({ objects, pipeline });
    expect(kinds(result.problems)).toContain('foreign-key');
    expect(result.problems.find((p) => p.kind === 'foreign-key')?.key).toBe(foreign.key);
    expect(reads.has(foreign.key)).toBe(false);
  });

  it('finds a merged key listed both whole and as slices, a missing merged object once, an unlisted one by key', async () => {
    const { pipeline, a, b, c, cut1 } = await layout();
    const wholeA: ManifestFile = {
      ...a.entries[0]!,
      sliceStart: undefined,
      bytes: a.body.length,
      sha256: sha256Of(a.body),
    };
    await putManifest(
      clients.s3,
      bucket,
      pipeline,
      1,
      [...a.entries, wholeA, ...b.entries, ...c.entries],
      cut1,
      {},
    );
    await clients.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: b.key }));
    const stray = mergedKey(pipeline, { stream: 'output', checkpointId: 2, shard: 3 });
    await put(stray, a.body);
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    expect(kinds(result.problems)).toEqual([
      'foreign-key',
      'listed-twice',
      'missing-object',
      'unlisted-object',
    ]);
    expect(result.problems.filter((p) => p.kind === 'missing-object')).toEqual([
      { kind: 'missing-object', key: b.key, message: 'listed as 1 slice(s) by manifest 1 but absent' },
    ]);
    expect(result.problems.find((p) => p.kind === 'listed-twice')).toMatchObject({
      key: a.key,
      message: 'listed whole by manifest 1 and as slices by manifest 1',
    });
    expect(result.problems.find((p) => p.kind === 'unlisted-object')?.key).toBe(stray);
  });

  it('readFinalRows gives each row of a slice its entry lane', async () => {
    const pipeline = uniqueName('pl');
    const live = buildMerged(pipeline, { stream: 'output', checkpointId: 1 }, [
      { partition: 0, offsets: [0, 1] },
    ]);
    const epoch = buildMerged(pipeline, { stream: 'output', checkpointId: 1, topic: 'orders~1', index: 1 }, [
      { partition: 0, offsets: [0] },
    ]);
    await Promise.all([write(live), write(epoch)]);
    const cut = { 'orders#0': 1, 'orders~1#0': 0 };
    await putManifest(clients.s3, bucket, pipeline, 1, [...live.entries, ...epoch.entries], cut, {});
    expect((await verifySink({ s3: clients.s3, bucket, pipeline })).problems).toEqual([]);
    const rows = await readFinalRows({ s3: clients.s3, bucket, pipeline });
    expect(rows.map((row) => `${row.topic}@${(row.row.source as { offset: number }).offset}`)).toEqual([
      'orders@0',
      'orders@1',
      'orders~1@0',
    ]);
  });

  it('finds a slice of another lane than its key names', async () => {
    const { pipeline, merged, cut } = await oneObject();
    const entries = [merged.entries[0]!, { ...merged.entries[1]!, topic: 'orders~1' }, merged.entries[2]!];
    await putManifest(clients.s3, bucket, pipeline, 1, entries, { ...cut, 'orders~1#1': 2 }, {});
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    expect(result.problems.find((p) => p.kind === 'foreign-key')?.message).toMatch(
      /merged object of lane orders, listed as a slice of orders~1/,
    );
    await expect(readAll(pipeline)).rejects.toThrow(
      /merged object of lane orders, listed as a slice of orders~1/,
    );
  });
});
