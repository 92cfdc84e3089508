/**
 * The S3 Tables catalog against a mocked S3 Tables client (aws-sdk-client-mock): the service cannot run here, so a
 * tiny in-memory fake of one table (its metadata location and version token) answers as the service does, with its
 * own ConflictException for a stale token and NotFoundException for a table it does not have. The metadata JSON,
 * the manifests and the data files go to the real local S3 server, and icebird reads the table back from there.
 * Asserted: the exact inputs of GetTableMetadataLocation, UpdateTableMetadataLocation and CreateTable; each conflict
 * answer as `conflict`; other failures as one line naming the catalog, the table and the call; and appendCheckpoint
 * through the catalog: concurrent appends in one chain, a retried checkpoint appended once, a swap that landed
 * although its answer was lost found and not repeated.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import {
  AccessDeniedException,
  ConflictException,
  CreateTableCommand,
  GetTableMetadataLocationCommand,
  InternalServerErrorException,
  NotFoundException,
  S3TablesClient,
  S3TablesServiceException,
  UpdateTableMetadataLocationCommand,
  type UpdateTableMetadataLocationCommandInput,
} from '@aws-sdk/client-s3tables';
import { type AwsClientStub, mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { TransientAwsError } from '../../shared/errors.ts';
import { appendCheckpoint, tableLayout } from '../../shared/iceberg/append.ts';
import { readMetadataJson } from '../../shared/iceberg/metadata-json.ts';
import { S3TablesCatalog, S3TablesCatalogError } from '../../shared/iceberg/s3-tables-catalog.ts';
import { createTableMetadata, mainHistory, snapshotIdOf } from '../../shared/iceberg/table-metadata.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { checkpoint, dataFile, orderIds, orderIdsRead, outputTable, rows } from './catalog-drive.ts';
import { localS3Fetch } from './icebird-s3.ts';

let res: TestResources;
let s3: S3Client;
beforeAll(async () => {
  res = await freshResources('ices3t');
  s3 = res.clients.s3;
  vi.stubGlobal('fetch', localS3Fetch(s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

const TABLE = {
  tableBucketARN: 'arn:aws:s3tables:eu-west-1:123456789012:bucket/analytics',
  namespace: 'eos',
  name: 'orders',
};

/** One table as S3 Tables keeps it: a version token that every change replaces, and a metadata location. */
interface FakeTable {
  exists: boolean;
  token: number;
  metadataLocation: string | undefined;
  readonly warehouseLocation: string;
  /** Applies the next swap and then answers as a retry by the SDK would after a lost response. */
  loseNextSwapAnswer: boolean;
}

function conflict(): ConflictException {
  return new ConflictException({
    message: 'The provided version token does not match the current version token of the table.',
    $metadata: { httpStatusCode: 409 },
  });
}

const notFound = () =>
  new NotFoundException({ message: 'The specified table does not exist.', $metadata: {} });

let client: S3TablesClient;
let api: AwsClientStub<S3TablesClient>;
let table: FakeTable;

/**
 * A client whose calls the fake table answers, fresh for each test: the table lives in the closure, so calls a
 * test leaves running never reach the next test's table.
 */
function fakeS3Tables(): { client: S3TablesClient; api: AwsClientStub<S3TablesClient>; table: FakeTable } {
  const fake: FakeTable = {
    exists: true,
    token: 1,
    metadataLocation: undefined,
    warehouseLocation: `s3://${res.bucket}/${uniqueName('warehouse')}`,
    loseNextSwapAnswer: false,
  };
  const own = new S3TablesClient({
    region: 'eu-west-1',
    credentials: { accessKeyId: 'a', secretAccessKey: 's' },
  });
  const stub = mockClient(own);
  stub.on(GetTableMetadataLocationCommand).callsFake(() => {
    if (!fake.exists) throw notFound();
    return {
      versionToken: `token-${fake.token}`,
      warehouseLocation: fake.warehouseLocation,
      ...(fake.metadataLocation ? { metadataLocation: fake.metadataLocation } : {}),
    };
  });
  stub.on(UpdateTableMetadataLocationCommand).callsFake((input: UpdateTableMetadataLocationCommandInput) => {
    if (!fake.exists) throw notFound();
    if (input.versionToken !== `token-${fake.token}`) throw conflict();
    fake.token += 1;
    fake.metadataLocation = input.metadataLocation;
    if (fake.loseNextSwapAnswer) {
      fake.loseNextSwapAnswer = false;
      throw conflict();
    }
    return {
      name: TABLE.name,
      tableARN: `${TABLE.tableBucketARN}/table/1`,
      namespace: [TABLE.namespace],
      versionToken: `token-${fake.token}`,
      metadataLocation: input.metadataLocation,
    };
  });
  stub.on(CreateTableCommand).callsFake(() => {
    if (fake.exists) throw conflict();
    fake.exists = true;
    return { tableARN: `${TABLE.tableBucketARN}/table/1`, versionToken: `token-${fake.token}` };
  });
  return { client: own, api: stub, table: fake };
}

beforeEach(() => {
  ({ client, api, table } = fakeS3Tables());
});

function catalog(): S3TablesCatalog {
  return new S3TablesCatalog(client, s3, TABLE);
}

function emptyMetadata(location: string) {
  const { schema, lastColumnId, spec, lastPartitionId } = tableLayout(outputTable(location));
  return createTableMetadata({ location, schema, lastColumnId, spec, lastPartitionId, nowMs: 1 });
}

function swaps(): UpdateTableMetadataLocationCommandInput[] {
  return api.commandCalls(UpdateTableMetadataLocationCommand).map((call) => call.args[0].input);
}

describe('S3TablesCatalog', () => {
  it('has no state while the table has no metadata location, or no table, and creates none on load', async () => {
    expect(await catalog().load()).toBeUndefined();
    expect(api.commandCalls(GetTableMetadataLocationCommand).map((call) => call.args[0].input)).toEqual([
      TABLE,
    ]);
    table.exists = false;
    expect(await catalog().load()).toBeUndefined();
    expect(api.commandCalls(CreateTableCommand)).toHaveLength(0);
  });

  it('writes the metadata once under the warehouse location, then swaps it in with the loaded token', async () => {
    const tables = catalog();
    const first = emptyMetadata(await tables.warehouseLocation());
    const committed = await tables.commit(undefined, first);
    if (committed === 'conflict') throw new Error('first commit refused');
    expect(committed.location).toMatch(
      new RegExp(
        `^${table.warehouseLocation}/metadata/00000-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\\.metadata\\.json$`,
      ),
    );
    expect(swaps()).toEqual([{ ...TABLE, versionToken: 'token-1', metadataLocation: committed.location }]);
    expect(committed).toEqual({ metadata: first, location: committed.location, version: 'token-2' });
    expect(await readMetadataJson(s3, committed.location)).toEqual(first);
    expect(await tables.load()).toEqual(committed);

    const second = { ...first, properties: { owner: 'eos' } };
    const next = await tables.commit(committed, second);
    if (next === 'conflict') throw new Error('second commit refused');
    expect(next.location).toMatch(/\/metadata\/00001-[0-9a-f-]{36}\.metadata\.json$/);
    expect(swaps()[1]).toEqual({ ...TABLE, versionToken: 'token-2', metadataLocation: next.location });
    expect(next.version).toBe('token-3');
  });

  it('answers conflict to a stale token (ConflictException, or any 409) and leaves the pointer', async () => {
    const tables = catalog();
    const first = await tables.commit(undefined, emptyMetadata(await tables.warehouseLocation()));
    if (first === 'conflict') throw new Error('first commit refused');
    const winner = await tables.commit(first, { ...first.metadata, properties: { n: '1' } });
    if (winner === 'conflict') throw new Error('second commit refused');
    expect(await tables.commit(first, { ...first.metadata, properties: { n: '2' } })).toBe('conflict');
    api.on(UpdateTableMetadataLocationCommand).rejects(
      new S3TablesServiceException({
        name: 'SomeConflict',
        $fault: 'client',
        $metadata: { httpStatusCode: 409 },
      }),
    );
    expect(await tables.commit(winner, { ...first.metadata, properties: { n: '3' } })).toBe('conflict');
    expect(await tables.load()).toEqual(winner);
  });

  it('answers conflict to a first commit when another writer gave the table metadata first', async () => {
    const tables = catalog();
    const location = await tables.warehouseLocation();
    expect(await tables.commit(undefined, emptyMetadata(location))).not.toBe('conflict');
    expect(await tables.commit(undefined, emptyMetadata(location))).toBe('conflict');
    expect(swaps()).toHaveLength(1);
  });

  it('creates a missing table (format ICEBERG) for its first commit', async () => {
    table.exists = false;
    const tables = catalog();
    const location = await tables.warehouseLocation();
    expect(api.commandCalls(CreateTableCommand).map((call) => call.args[0].input)).toEqual([
      { ...TABLE, format: 'ICEBERG' },
    ]);
    expect(await tables.commit(undefined, emptyMetadata(location))).toMatchObject({ version: 'token-2' });
  });

  it('goes on when another writer created the table between its look and its CreateTable', async () => {
    const tables = catalog();
    const location = table.warehouseLocation;
    const answers = api.on(GetTableMetadataLocationCommand);
    // The first look misses the table; CreateTable then meets it (ConflictException) and the next look finds it.
    const lookups = api.commandCalls(GetTableMetadataLocationCommand).length;
    answers.rejectsOnce(notFound()).callsFake(() => ({
      versionToken: `token-${table.token}`,
      warehouseLocation: table.warehouseLocation,
      ...(table.metadataLocation ? { metadataLocation: table.metadataLocation } : {}),
    }));
    expect(await tables.commit(undefined, emptyMetadata(location))).toMatchObject({ version: 'token-2' });
    expect(api.commandCalls(CreateTableCommand)).toHaveLength(1);
    expect(api.commandCalls(GetTableMetadataLocationCommand).length - lookups).toBe(2);
  });

  it("refuses a new table's metadata made for another location than the warehouse", async () => {
    const other = `s3://${res.bucket}/elsewhere`;
    await expect(catalog().commit(undefined, emptyMetadata(other))).rejects.toThrow(
      /S3 Tables catalog: a new table's location must be its warehouse location .* \(eos\.orders in arn:/,
    );
    expect(swaps()).toHaveLength(0);
  });

  it('fails a load whose metadata file is missing, naming the table and the file', async () => {
    table.metadataLocation = `${table.warehouseLocation}/metadata/00000-x.metadata.json`;
    await expect(catalog().load()).rejects.toThrow(
      `S3 Tables catalog: the metadata file ${table.metadataLocation} of eos.orders in ${TABLE.tableBucketARN} is missing`,
    );
  });

  it('fails other answers in one line naming the catalog, the table and the call; transient ones as such', async () => {
    const tables = catalog();
    const location = await tables.warehouseLocation();
    api
      .on(UpdateTableMetadataLocationCommand)
      .rejects(
        new AccessDeniedException({ message: 'User is not\nauthorized', $metadata: { httpStatusCode: 403 } }),
      );
    const denied = await tables.commit(undefined, emptyMetadata(location)).catch((error: unknown) => error);
    expect(denied).toBeInstanceOf(S3TablesCatalogError);
    expect((denied as Error).message).toBe(
      `S3 Tables UpdateTableMetadataLocation of eos.orders in ${TABLE.tableBucketARN} failed: AccessDeniedException: User is not authorized`,
    );
    api
      .on(GetTableMetadataLocationCommand)
      .rejects(
        new InternalServerErrorException({ message: 'try again', $metadata: { httpStatusCode: 500 } }),
      );
    const transient = await tables.load().catch((error: unknown) => error);
    expect(transient).toBeInstanceOf(TransientAwsError);
    expect((transient as TransientAwsError).operation).toBe(
      `S3 Tables GetTableMetadataLocation of eos.orders in ${TABLE.tableBucketARN}`,
    );
  });
});

describe('appendCheckpoint through S3 Tables', () => {
  it('lands concurrent appends in one chain that icebird reads whole', async () => {
    const tables = catalog();
    const output = outputTable(await tables.warehouseLocation());
    const files = await Promise.all([0, 1, 2].map((n) => dataFile(s3, output, rows(n * 10, 3))));
    const outcomes = await Promise.all(
      files.map((file, n) => appendCheckpoint(tables, s3, checkpoint(output, n + 1, [file]))),
    );
    expect(outcomes.map((outcome) => outcome.outcome)).toEqual(['appended', 'appended', 'appended']);
    expect(outcomes.some((outcome) => outcome.attempts > 1)).toBe(true);
    const state = await tables.load();
    expect(new Set(mainHistory(state!.metadata))).toEqual(
      new Set([1, 2, 3].map((id) => snapshotIdOf('orders', id))),
    );
    expect(mainHistory(state!.metadata)).toHaveLength(3);
    expect(await orderIdsRead(state!)).toEqual(orderIds([0, 3], [10, 3], [20, 3]));
  });

  it('appends a retried checkpoint once', async () => {
    const tables = catalog();
    const output = outputTable(await tables.warehouseLocation());
    const file = await dataFile(s3, output, rows(0, 4));
    expect((await appendCheckpoint(tables, s3, checkpoint(output, 1, [file]))).outcome).toBe('appended');
    const retry = await appendCheckpoint(tables, s3, checkpoint(output, 1, [file]));
    expect(retry).toMatchObject({ outcome: 'already-committed', snapshotId: snapshotIdOf('orders', 1) });
    expect(swaps()).toHaveLength(1);
    expect(await orderIdsRead(retry.state)).toEqual(orderIds([0, 4]));
  });

  it('finds a swap that landed although its answer was a conflict (an SDK retry after a lost answer)', async () => {
    const tables = catalog();
    const output = outputTable(await tables.warehouseLocation());
    table.loseNextSwapAnswer = true;
    const file = await dataFile(s3, output, rows(0, 2));
    const appended = await appendCheckpoint(tables, s3, checkpoint(output, 1, [file]));
    expect(appended).toMatchObject({ outcome: 'already-committed', snapshotId: snapshotIdOf('orders', 1) });
    expect(appended.state.metadata.snapshots).toHaveLength(1);
    expect(swaps()).toHaveLength(1);
    expect(await orderIdsRead(appended.state)).toEqual(orderIds([0, 2]));
  });
});
