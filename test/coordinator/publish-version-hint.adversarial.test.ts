/**
 * The file catalog's version hint, which readers without a catalog (icebird, DuckDB, Spark's Hadoop tables) follow
 * to the table's current metadata: two publishers loading and committing at once (a publish and its zombie, or an
 * idle execution's catch-up and the next checkpoint's publish). Against the local S3 server.
 */
import { GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { createTableMetadata, type TableMetadata } from '../../shared/iceberg/table-metadata.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubhint');
});

/** An S3 client whose puts of `key` wait until `release`; `arrived` resolves at the first. */
function holdingPuts(
  inner: S3Client,
  key: string,
): { s3: S3Client; arrived: Promise<void>; release: () => void } {
  let arrive!: () => void;
  const arrived = new Promise<void>((resolve) => {
    arrive = resolve;
  });
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const s3 = new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop !== 'send') return Reflect.get(target, prop, receiver);
      return async (command: unknown, ...rest: unknown[]) => {
        const send = target.send.bind(target) as (c: unknown, ...r: unknown[]) => Promise<unknown>;
        if (command instanceof PutObjectCommand && command.input.Key === key) {
          arrive();
          await gate;
        }
        return send(command, ...rest);
      };
    },
  });
  return { s3, arrived, release };
}

function metadataOf(location: string, n: number): TableMetadata {
  const first = createTableMetadata({
    location,
    schema: { type: 'struct', 'schema-id': 0, fields: [{ id: 1, name: 'n', required: true, type: 'long' }] },
    lastColumnId: 1,
    spec: { 'spec-id': 0, fields: [] },
    lastPartitionId: 999,
    nowMs: 1_000,
  });
  return { ...first, properties: { ...first.properties, n: String(n) } };
}

async function hintOf(catalog: FileCatalog): Promise<string | undefined> {
  const answer = await res.clients.s3.send(
    new GetObjectCommand({ Bucket: res.bucket, Key: catalog.hintKey }),
  );
  return answer.Body?.transformToString();
}

describe("the file catalog's version hint never goes back", () => {
  // A load that found version 2 behind a hint of 1 (a crash between a metadata put and its hint put, or a hint put
  // that failed and was swallowed) writes 2; if another publisher commits 3 and writes its hint meanwhile, an
  // unconditional late put would set the hint back to 2, and readers that follow it would miss checkpoint 3 until a
  // later commit or load rewrote it: on an idle pipeline, whose executions load no table when nothing lags,
  // indefinitely. The hint is put on the ETag it was read with, so the late put is refused and the hint read again.
  it('a load that found the hint behind does not set it back below a commit made meanwhile', async () => {
    const root = `${uniqueName('hint')}/iceberg/output`;
    const writer = new FileCatalog(res.clients.s3, res.bucket, root);
    const v1 = await writer.commit(undefined, metadataOf(writer.location, 1));
    if (v1 === 'conflict') throw new Error('the first commit met a conflict');
    const v2 = await writer.commit(v1, metadataOf(writer.location, 2));
    if (v2 === 'conflict') throw new Error('the second commit met a conflict');
    // The hint left behind, as a crash between version 2's metadata put and its hint put leaves it.
    await res.clients.s3.send(
      new PutObjectCommand({ Bucket: res.bucket, Key: writer.hintKey, Body: '1', ContentType: 'text/plain' }),
    );

    const held = holdingPuts(res.clients.s3, writer.hintKey);
    const slow = new FileCatalog(held.s3, res.bucket, root);
    const slowLoad = slow.load();
    await held.arrived;
    const current = await writer.load();
    expect(current?.version).toBe('2');
    if (!current) throw new Error('the table has no metadata');
    expect(await writer.commit(current, metadataOf(writer.location, 3))).not.toBe('conflict');
    expect(await hintOf(writer)).toBe('3');

    held.release();
    expect((await slowLoad)?.version).toBe('2');
    expect(await hintOf(writer)).toBe('3');
  });

  // Two publishers committing one after the other (a publish and its zombie, or a catch-up and the next checkpoint's
  // publish): the first's hint put for version 2 arrives after the second committed 3 and put its hint.
  it('a commit whose hint put arrives late does not set it back below the next commit', async () => {
    const root = `${uniqueName('hint')}/iceberg/output`;
    const writer = new FileCatalog(res.clients.s3, res.bucket, root);
    const v1 = await writer.commit(undefined, metadataOf(writer.location, 1));
    if (v1 === 'conflict') throw new Error('the first commit met a conflict');

    const held = holdingPuts(res.clients.s3, writer.hintKey);
    const slow = new FileCatalog(held.s3, res.bucket, root);
    const loaded = await slow.load();
    expect(loaded?.version).toBe('1');
    if (!loaded) throw new Error('the table has no metadata');
    const slowCommit = slow.commit(loaded, metadataOf(writer.location, 2));
    await held.arrived;

    const other = new FileCatalog(res.clients.s3, res.bucket, root);
    const current = await other.load();
    expect(current?.version).toBe('2');
    if (!current) throw new Error('the table has no metadata');
    expect(await other.commit(current, metadataOf(writer.location, 3))).not.toBe('conflict');
    expect(await hintOf(writer)).toBe('3');

    held.release();
    expect(await slowCommit).toMatchObject({ version: '2' });
    expect(await hintOf(writer)).toBe('3');
    expect((await writer.load())?.version).toBe('3');
  });
});
