/**
 * The Glue catalog against a mocked Glue client (aws-sdk-client-mock): Glue cannot run here, so a tiny in-memory
 * fake of one Glue table (its input fields and a VersionId that every update raises) answers as Glue does, with
 * its own ConcurrentModificationException for a stale VersionId, AlreadyExistsException for a second creation and
 * EntityNotFoundException for a table it does not have. The metadata JSON, the manifests and the data files go to
 * the real local S3 server, and icebird reads the table back from there. Asserted: the exact inputs of GetTable,
 * CreateTable and UpdateTable; each conflict answer as `conflict`; other failures as one line naming the catalog,
 * the table and the call; and appendCheckpoint through the catalog: concurrent appends in one chain, a retried
 * checkpoint appended once, an update that landed although its answer was lost found and not repeated.
 */

import {
  AccessDeniedException,
  AlreadyExistsException,
  ConcurrentModificationException,
  CreateTableCommand,
  type CreateTableCommandInput,
  EntityNotFoundException,
  GetTableCommand,
  GlueClient,
  InternalServiceException,
  type Table,
  UpdateTableCommand,
  type UpdateTableCommandInput,
} from '@aws-sdk/client-glue';
import type { S3Client } from '@aws-sdk/client-s3';
import { type AwsClientStub, mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { TransientAwsError } from '../../shared/errors.ts';
import { appendCheckpoint, tableLayout } from '../../shared/iceberg/append.ts';
import { GlueCatalog, GlueCatalogError } from '../../shared/iceberg/glue-catalog.ts';
import { readMetadataJson } from '../../shared/iceberg/metadata-json.ts';
import { createTableMetadata, mainHistory, snapshotIdOf } from '../../shared/iceberg/table-metadata.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { checkpoint, dataFile, orderIds, orderIdsRead, outputTable, rows } from './catalog-drive.ts';
import { localS3Fetch } from './icebird-s3.ts';

let res: TestResources;
let s3: S3Client;
beforeAll(async () => {
  res = await freshResources('iceglue');
  s3 = res.clients.s3;
  vi.stubGlobal('fetch', localS3Fetch(s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

const ID = { databaseName: 'analytics', tableName: 'orders' };

/** One Glue table as Glue keeps it, absent until created. */
interface FakeGlue {
  table: Table | undefined;
  /** Applies the next update and then answers as a retry by the SDK would after a lost response. */
  loseNextUpdateAnswer: boolean;
}

const stale = () =>
  new ConcurrentModificationException({
    message: 'Update table failed due to concurrent modifications.',
    $metadata: { httpStatusCode: 400 },
  });
const notFound = () =>
  new EntityNotFoundException({ message: 'Entity Not Found', $metadata: { httpStatusCode: 400 } });

let client: GlueClient;
let api: AwsClientStub<GlueClient>;
let glue: FakeGlue;

/** A client whose calls the fake table answers, fresh for each test (the table lives in the closure). */
function fakeGlue(): { client: GlueClient; api: AwsClientStub<GlueClient>; glue: FakeGlue } {
  const fake: FakeGlue = { table: undefined, loseNextUpdateAnswer: false };
  const own = new GlueClient({
    region: 'eu-west-1',
    credentials: { accessKeyId: 'a', secretAccessKey: 's' },
  });
  const stub = mockClient(own);
  stub.on(GetTableCommand).callsFake(() => {
    if (!fake.table) throw notFound();
    return { Table: structuredClone(fake.table) };
  });
  stub.on(CreateTableCommand).callsFake((input: CreateTableCommandInput) => {
    if (fake.table) throw new AlreadyExistsException({ message: 'Table already exists.', $metadata: {} });
    fake.table = { ...structuredClone(input.TableInput!), DatabaseName: input.DatabaseName, VersionId: '0' };
    return {};
  });
  stub.on(UpdateTableCommand).callsFake((input: UpdateTableCommandInput) => {
    if (!fake.table) throw notFound();
    if (input.VersionId !== undefined && input.VersionId !== fake.table.VersionId) throw stale();
    const version = String(Number(fake.table.VersionId) + 1);
    fake.table = {
      ...structuredClone(input.TableInput!),
      DatabaseName: input.DatabaseName,
      VersionId: version,
    };
    if (fake.loseNextUpdateAnswer) {
      fake.loseNextUpdateAnswer = false;
      throw stale();
    }
    return {};
  });
  return { client: own, api: stub, glue: fake };
}

beforeEach(() => {
  ({ client, api, glue } = fakeGlue());
});

function catalog(
  options?: { skipArchive?: boolean },
  id: typeof ID & { catalogId?: string } = ID,
): GlueCatalog {
  return new GlueCatalog(client, s3, id, options);
}

function newMetadata() {
  const location = `s3://${res.bucket}/${uniqueName('tables/orders')}`;
  const { schema, lastColumnId, spec, lastPartitionId } = tableLayout(outputTable(location));
  return createTableMetadata({ location, schema, lastColumnId, spec, lastPartitionId, nowMs: 1 });
}

const COLUMNS = [
  {
    Name: 'orderId',
    Type: 'string',
    Parameters: {
      'iceberg.field.id': '1',
      'iceberg.field.optional': 'false',
      'iceberg.field.current': 'true',
    },
  },
  {
    Name: 'amount',
    Type: 'double',
    Parameters: {
      'iceberg.field.id': '2',
      'iceberg.field.optional': 'true',
      'iceberg.field.current': 'true',
    },
  },
  {
    Name: 'source',
    Type: 'struct<topic:string,partition:int,offset:bigint>',
    Comment: 'Kafka lineage: topic, partition, offset',
    Parameters: {
      'iceberg.field.id': '3',
      'iceberg.field.optional': 'false',
      'iceberg.field.current': 'true',
    },
  },
];

function inputs<T>(command: { new (...args: never[]): unknown }): T[] {
  return api.commandCalls(command as never).map((call) => call.args[0].input as T);
}

describe('GlueCatalog', () => {
  it('has no state without a Glue table, or with one that has no metadata location', async () => {
    expect(await catalog().load()).toBeUndefined();
    expect(inputs(GetTableCommand)).toEqual([{ DatabaseName: 'analytics', Name: 'orders' }]);
    glue.table = { Name: 'orders', TableType: 'EXTERNAL_TABLE', VersionId: '0' };
    expect(await catalog().load()).toBeUndefined();
  });

  it('creates the Glue table on the first commit, then updates it on the loaded VersionId', async () => {
    const tables = catalog();
    const first = newMetadata();
    const created = await tables.commit(undefined, first);
    if (created === 'conflict') throw new Error('first commit refused');
    expect(created.location).toMatch(
      new RegExp(
        `^${first.location}/metadata/00000-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\\.metadata\\.json$`,
      ),
    );
    expect(inputs(CreateTableCommand)).toEqual([
      {
        DatabaseName: 'analytics',
        TableInput: {
          Name: 'orders',
          TableType: 'EXTERNAL_TABLE',
          Parameters: { table_type: 'ICEBERG', metadata_location: created.location },
          StorageDescriptor: { Location: first.location, Columns: COLUMNS },
        },
      },
    ]);
    expect(created).toEqual({ metadata: first, location: created.location, version: '0' });
    expect(await readMetadataJson(s3, created.location)).toEqual(first);
    const loaded = await tables.load();
    expect(loaded).toEqual(created);

    glue.table = {
      ...glue.table!,
      Description: 'orders',
      Owner: 'eos',
      Parameters: { ...glue.table!.Parameters, team: 'data' },
    };
    glue.table.VersionId = '1';
    const reloaded = await tables.load();
    const gets = inputs(GetTableCommand).length;
    const updated = await tables.commit(reloaded, { ...first, properties: { n: '1' } });
    if (updated === 'conflict') throw new Error('second commit refused');
    expect(updated.location).toMatch(/\/metadata\/00001-[0-9a-f-]{36}\.metadata\.json$/);
    expect(inputs(UpdateTableCommand)).toEqual([
      {
        DatabaseName: 'analytics',
        TableInput: {
          Name: 'orders',
          Description: 'orders',
          Owner: 'eos',
          TableType: 'EXTERNAL_TABLE',
          Parameters: {
            team: 'data',
            table_type: 'ICEBERG',
            metadata_location: updated.location,
            previous_metadata_location: created.location,
          },
          StorageDescriptor: { Location: first.location, Columns: COLUMNS },
        },
        SkipArchive: true,
        VersionId: '1',
      },
    ]);
    // The Glue table loaded with the state is the base: one look afterwards, for the new VersionId, and none before.
    expect(inputs(GetTableCommand).length - gets).toBe(1);
    expect(updated.version).toBe('2');
    expect(await tables.load()).toEqual(updated);
  });

  it('answers conflict to a stale VersionId (ConcurrentModificationException) and leaves the table', async () => {
    const [mine, theirs] = [catalog(), catalog()];
    const first = await mine.commit(undefined, newMetadata());
    if (first === 'conflict') throw new Error('first commit refused');
    const [a, b] = [await mine.load(), await theirs.load()];
    const winner = await theirs.commit(b, { ...first.metadata, properties: { n: 'theirs' } });
    if (winner === 'conflict') throw new Error('their commit refused');
    expect(await mine.commit(a, { ...first.metadata, properties: { n: 'mine' } })).toBe('conflict');
    expect(inputs<UpdateTableCommandInput>(UpdateTableCommand).map((input) => input.VersionId)).toEqual([
      '0',
      '0',
    ]);
    expect(await mine.load()).toEqual(winner);
  });

  it('answers conflict without an update when the Glue table names another metadata file than the base', async () => {
    const [mine, theirs] = [catalog(), catalog()];
    const first = await mine.commit(undefined, newMetadata());
    if (first === 'conflict') throw new Error('first commit refused');
    const loaded = await mine.load();
    await theirs.commit(await theirs.load(), { ...first.metadata, properties: { n: 'theirs' } });
    await mine.load(); // the Glue table it keeps is now the newer one
    expect(await mine.commit(loaded, { ...first.metadata, properties: { n: 'mine' } })).toBe('conflict');
    expect(await mine.commit(undefined, newMetadata())).toBe('conflict');
    expect(inputs(UpdateTableCommand)).toHaveLength(1);
  });

  it('answers conflict when another writer created the Glue table first (AlreadyExistsException)', async () => {
    const tables = catalog();
    api.on(GetTableCommand).rejectsOnce(notFound());
    glue.table = {
      Name: 'orders',
      VersionId: '0',
      Parameters: { table_type: 'ICEBERG', metadata_location: 'x' },
    };
    expect(await tables.commit(undefined, newMetadata())).toBe('conflict');
    expect(inputs(CreateTableCommand)).toHaveLength(1);
  });

  it("updates a Glue table made without metadata, keeping its fields, and sends the caller's options", async () => {
    glue.table = {
      Name: 'orders',
      Description: 'made by the stack',
      TableType: 'EXTERNAL_TABLE',
      Parameters: { table_type: 'ICEBERG', classification: 'parquet' },
      VersionId: '0',
    };
    const tables = catalog({ skipArchive: false }, { ...ID, catalogId: '123456789012' });
    expect(await tables.load()).toBeUndefined();
    const committed = await tables.commit(undefined, newMetadata());
    expect(committed).toMatchObject({ version: '1' });
    expect(inputs(GetTableCommand)[0]).toEqual({
      CatalogId: '123456789012',
      DatabaseName: 'analytics',
      Name: 'orders',
    });
    expect(inputs<UpdateTableCommandInput>(UpdateTableCommand)[0]).toMatchObject({
      CatalogId: '123456789012',
      SkipArchive: false,
      VersionId: '0',
      TableInput: {
        Description: 'made by the stack',
        Parameters: {
          table_type: 'ICEBERG',
          classification: 'parquet',
          metadata_location: expect.any(String),
        },
      },
    });
    expect(inputs(CreateTableCommand)).toHaveLength(0);
  });

  it("lists the current schema's columns, then those only an older schema has as not current", async () => {
    const first = newMetadata();
    const [schema] = first.schemas;
    const narrower = {
      ...schema!,
      'schema-id': 1,
      fields: schema!.fields.filter((f) => f.name !== 'amount'),
    };
    const evolved = { ...first, schemas: [schema!, narrower], 'current-schema-id': 1 };
    expect(await catalog().commit(undefined, evolved)).not.toBe('conflict');
    const [created] = inputs<CreateTableCommandInput>(CreateTableCommand);
    expect(created?.TableInput?.StorageDescriptor?.Columns).toEqual([
      COLUMNS[0],
      COLUMNS[2],
      { ...COLUMNS[1], Parameters: { ...COLUMNS[1]!.Parameters, 'iceberg.field.current': 'false' } },
    ]);
  });

  it('fails a load whose metadata file is missing, naming the table and the file', async () => {
    glue.table = {
      Name: 'orders',
      VersionId: '0',
      Parameters: {
        table_type: 'iceberg',
        metadata_location: `s3://${res.bucket}/gone/00000-x.metadata.json`,
      },
    };
    await expect(catalog().load()).rejects.toThrow(
      `Glue catalog: analytics.orders names a missing s3://${res.bucket}/gone/00000-x.metadata.json`,
    );
  });

  it('refuses a Glue table of another type', async () => {
    glue.table = {
      Name: 'orders',
      VersionId: '0',
      Parameters: { table_type: 'HIVE', metadata_location: 's3://b/k' },
    };
    await expect(catalog().load()).rejects.toThrow(
      'Glue catalog: analytics.orders has table_type HIVE, not ICEBERG',
    );
  });

  it('fails other answers in one line naming the catalog, the table and the call; transient ones as such', async () => {
    api.on(CreateTableCommand).rejects(notFound());
    const missing = await catalog()
      .commit(undefined, newMetadata())
      .catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(GlueCatalogError);
    expect((missing as Error).message).toBe(
      'Glue CreateTable of analytics.orders failed: EntityNotFoundException: Entity Not Found',
    );
    glue.table = { Name: 'orders', VersionId: '0', Parameters: { table_type: 'ICEBERG' } };
    api
      .on(UpdateTableCommand)
      .rejects(new AccessDeniedException({ message: 'not\nallowed', $metadata: { httpStatusCode: 400 } }));
    await expect(catalog().commit(undefined, newMetadata())).rejects.toThrow(
      /^Glue UpdateTable of analytics\.orders failed: AccessDeniedException: not allowed$/,
    );
    api
      .on(GetTableCommand)
      .rejects(new InternalServiceException({ message: 'later', $metadata: { httpStatusCode: 500 } }));
    const transient = await catalog()
      .load()
      .catch((error: unknown) => error);
    expect(transient).toBeInstanceOf(TransientAwsError);
    expect((transient as TransientAwsError).operation).toBe('Glue GetTable of analytics.orders');
  });
});

describe('appendCheckpoint through Glue', () => {
  function output() {
    return outputTable(`s3://${res.bucket}/${uniqueName('tables/orders')}`);
  }

  it('lands concurrent appends in one chain that icebird reads whole', async () => {
    const tables = catalog();
    const table = output();
    const files = await Promise.all([0, 1, 2].map((n) => dataFile(s3, table, rows(n * 10, 3))));
    const outcomes = await Promise.all(
      files.map((file, n) => appendCheckpoint(tables, s3, checkpoint(table, n + 1, [file]))),
    );
    expect(outcomes.map((outcome) => outcome.outcome)).toEqual(['appended', 'appended', 'appended']);
    expect(outcomes.some((outcome) => outcome.attempts > 1)).toBe(true);
    const state = await tables.load();
    const history = mainHistory(state!.metadata);
    expect(history).toHaveLength(3);
    expect(new Set(history)).toEqual(new Set([1, 2, 3].map((id) => snapshotIdOf('orders', id))));
    expect(await orderIdsRead(state!)).toEqual(orderIds([0, 3], [10, 3], [20, 3]));
  });

  it('appends a retried checkpoint once', async () => {
    const tables = catalog();
    const table = output();
    const file = await dataFile(s3, table, rows(0, 4));
    expect((await appendCheckpoint(tables, s3, checkpoint(table, 1, [file]))).outcome).toBe('appended');
    const retry = await appendCheckpoint(catalog(), s3, checkpoint(table, 1, [file]));
    expect(retry).toMatchObject({ outcome: 'already-committed', snapshotId: snapshotIdOf('orders', 1) });
    expect(inputs(CreateTableCommand)).toHaveLength(1);
    expect(inputs(UpdateTableCommand)).toHaveLength(0);
    expect(await orderIdsRead(retry.state)).toEqual(orderIds([0, 4]));
  });

  it('finds an update that landed although its answer was a conflict (an SDK retry after a lost answer)', async () => {
    const tables = catalog();
    const table = output();
    await appendCheckpoint(tables, s3, checkpoint(table, 1, [await dataFile(s3, table, rows(0, 2))]));
    glue.loseNextUpdateAnswer = true;
    const second = await appendCheckpoint(
      tables,
      s3,
      checkpoint(table, 2, [await dataFile(s3, table, rows(5, 2))]),
    );
    expect(second).toMatchObject({ outcome: 'already-committed', snapshotId: snapshotIdOf('orders', 2) });
    expect(mainHistory(second.state.metadata)).toEqual([2, 1].map((id) => snapshotIdOf('orders', id)));
    expect(inputs(UpdateTableCommand)).toHaveLength(1);
    expect(await orderIdsRead(second.state)).toEqual(orderIds([0, 2], [5, 2]));
  });
});
