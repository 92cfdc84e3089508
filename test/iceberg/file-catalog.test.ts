/**
 * The file catalog against the local S3 server (which answers `If-None-Match: *` with 412 as S3 does): versions
 * written once and in order, a stale or concurrent writer of the same version losing with `conflict`, the hint
 * followed upward and done without, and put only on the hint it was read as.
 */
import { DeleteObjectCommand, GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { FileCatalog, HINT_ATTEMPTS } from '../../shared/iceberg/file-catalog.ts';
import { partitionSpec } from '../../shared/iceberg/partition-spec.ts';
import { icebergSchema } from '../../shared/iceberg/schema.ts';
import {
  appendSnapshot,
  createTableMetadata,
  snapshotIdOf,
  type TableMetadata,
} from '../../shared/iceberg/table-metadata.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('icecat');
});

function catalog(s3: S3Client = res.clients.s3): FileCatalog {
  return new FileCatalog(s3, res.bucket, uniqueName('tables/t'));
}

function firstMetadata(location: string): TableMetadata {
  const columns = [{ name: 'id', type: 'string', nullable: false }] as const;
  const { schema, lastColumnId } = icebergSchema(columns);
  const { spec, lastPartitionId } = partitionSpec(schema, columns, { timePartitioning: 'none' });
  return createTableMetadata({ location, schema, lastColumnId, spec, lastPartitionId, nowMs: 1 });
}

function appended(metadata: TableMetadata, checkpointId: number): TableMetadata {
  return appendSnapshot(metadata, {
    snapshotId: snapshotIdOf('p', checkpointId),
    manifestList: `${metadata.location}/metadata/snap-${checkpointId}.avro`,
    nowMs: 2,
    added: { dataFiles: 1, records: 1, filesSize: 1, partitions: 1 },
    pipelineId: 'p',
    checkpointId,
    lanes: ['t'],
  });
}

/** A client that counts the hint's gets and puts and answers each put of it with `refuse` when that is given. */
function hintCalls(refuse?: () => Error): { s3: S3Client; gets: number; puts: number } {
  const calls = { gets: 0, puts: 0 };
  const s3 = {
    send: (command: { input: { Key?: string } }) => {
      if (command.input.Key?.endsWith('version-hint.text')) {
        if (command instanceof GetObjectCommand) calls.gets += 1;
        if (command instanceof PutObjectCommand) {
          calls.puts += 1;
          if (refuse) return Promise.reject(refuse());
        }
      }
      return res.clients.s3.send(command as never);
    },
  } as unknown as S3Client;
  return Object.assign(calls, { s3 });
}

async function hint(table: FileCatalog): Promise<string | undefined> {
  return (await getBytes(res.clients.s3, res.bucket, table.hintKey))?.toString('utf8');
}

describe('FileCatalog', () => {
  it('has no table before the first commit, then versions 1, 2, … with the hint after each', async () => {
    const table = catalog();
    expect(await table.load()).toBeUndefined();
    const v1 = firstMetadata(table.location);
    const first = await table.commit(undefined, v1);
    expect(first).toEqual({
      metadata: v1,
      location: `s3://${res.bucket}/${table.root}/metadata/v1.metadata.json`,
      version: '1',
    });
    expect(await hint(table)).toBe('1');
    expect(await table.load()).toEqual(first);
    if (first === 'conflict') throw new Error('first commit refused');
    const v2 = appended(v1, 1);
    const second = await table.commit(first, v2);
    expect(second).toMatchObject({
      version: '2',
      location: expect.stringMatching(/\/metadata\/v2\.metadata\.json$/),
    });
    expect(await hint(table)).toBe('2');
    const loaded = await table.load();
    expect(loaded?.version).toBe('2');
    expect(loaded?.metadata).toEqual(v2);
  });

  it('answers conflict to a writer whose state is stale, and keeps what is there', async () => {
    const table = catalog();
    const first = await table.commit(undefined, firstMetadata(table.location));
    if (first === 'conflict') throw new Error('first commit refused');
    const winner = appended(first.metadata, 1);
    expect(await table.commit(first, winner)).not.toBe('conflict');
    expect(await table.commit(first, appended(first.metadata, 2))).toBe('conflict');
    expect(await table.commit(undefined, firstMetadata(table.location))).toBe('conflict');
    expect((await table.load())?.metadata).toEqual(winner);
  });

  it('lets exactly one of concurrent writers of the same version win', async () => {
    const table = catalog();
    const first = await table.commit(undefined, firstMetadata(table.location));
    if (first === 'conflict') throw new Error('first commit refused');
    const outcomes = await Promise.all(
      [1, 2, 3, 4].map((checkpointId) => table.commit(first, appended(first.metadata, checkpointId))),
    );
    const won = outcomes.filter((outcome) => outcome !== 'conflict');
    expect(won).toHaveLength(1);
    expect(outcomes.filter((outcome) => outcome === 'conflict')).toHaveLength(3);
    expect(await table.load()).toEqual(won[0]);
  });

  it('finds versions newer than the hint, and the newest without a hint', async () => {
    const table = catalog();
    let state = await table.commit(undefined, firstMetadata(table.location));
    for (const checkpointId of [1, 2]) {
      if (state === 'conflict') throw new Error('commit refused');
      state = await table.commit(state, appended(state.metadata, checkpointId));
    }
    // A slow writer put back an older hint.
    await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: table.hintKey, Body: '1' }));
    expect((await table.load())?.version).toBe('3');
    await res.clients.s3.send(new DeleteObjectCommand({ Bucket: res.bucket, Key: table.hintKey }));
    expect(await table.load()).toEqual(state);
  });

  it('keeps a commit done when its hint cannot be written', async () => {
    const failing = {
      send: (command: { input: { Key?: string } }) => {
        if (command instanceof PutObjectCommand && command.input.Key?.endsWith('version-hint.text')) {
          return Promise.reject(Object.assign(new Error('boom'), { name: 'InternalError' }));
        }
        return res.clients.s3.send(command as never);
      },
    } as unknown as S3Client;
    const table = catalog(failing);
    const committed = await table.commit(undefined, firstMetadata(table.location));
    expect(committed).toMatchObject({ version: '1' });
    expect(await hint(table)).toBeUndefined();
    expect(await table.load()).toEqual(committed);
  });

  it('puts the hint of a commit after a load on the ETag the load read, without reading the hint again', async () => {
    const root = uniqueName('tables/t');
    const first = await new FileCatalog(res.clients.s3, res.bucket, root).commit(
      undefined,
      firstMetadata(`s3://${res.bucket}/${root}`),
    );
    if (first === 'conflict') throw new Error('first commit refused');
    const counted = hintCalls();
    const table = new FileCatalog(counted.s3, res.bucket, root);
    const loaded = await table.load();
    if (!loaded) throw new Error('no table');
    expect([counted.gets, counted.puts]).toEqual([1, 0]);
    const second = await table.commit(loaded, appended(loaded.metadata, 1));
    if (second === 'conflict') throw new Error('second commit refused');
    await table.commit(second, appended(second.metadata, 2));
    expect([counted.gets, counted.puts]).toEqual([1, 2]);
    expect(await hint(table)).toBe('3');
  });

  it('writes the hint again when it was deleted after the load read it', async () => {
    const table = catalog();
    const first = await table.commit(undefined, firstMetadata(table.location));
    if (first === 'conflict') throw new Error('first commit refused');
    const loaded = await table.load();
    if (!loaded) throw new Error('no table');
    await res.clients.s3.send(new DeleteObjectCommand({ Bucket: res.bucket, Key: table.hintKey }));
    expect(await table.commit(loaded, appended(loaded.metadata, 1))).toMatchObject({ version: '2' });
    expect(await hint(table)).toBe('2');
  });

  it('gives up the hint after a bounded number of refused puts, and keeps the commit done', async () => {
    const refusing = hintCalls(() =>
      Object.assign(new Error('At least one of the pre-conditions you specified did not hold'), {
        name: 'PreconditionFailed',
        $metadata: { httpStatusCode: 412 },
      }),
    );
    const table = catalog(refusing.s3);
    const committed = await table.commit(undefined, firstMetadata(table.location));
    expect(committed).toMatchObject({ version: '1' });
    expect(refusing.puts).toBe(HINT_ATTEMPTS);
    expect(await hint(table)).toBeUndefined();
    expect(await table.load()).toEqual(committed);
    expect(refusing.puts).toBe(2 * HINT_ATTEMPTS);
  });
});
