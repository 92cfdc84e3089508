/**
 * The query engine: DuckDB through `@duckdb/node-api`, an optional dependency loaded only when `eos query` runs
 * (a dynamic import, so the rest of eos works without it and a missing install is one clear line, not a crash at
 * start). DuckDB reads NDJSON (gzip or not) with `read_json` and Parquet with `read_parquet`, given explicit file
 * lists only: the view is built from the paths `collect.ts` fetched and checked, never a directory or glob.
 */
import type { DuckDBConnection, DuckDBValueConverter, Json } from '@duckdb/node-api';
import type { LocalCommittedFile } from './collect.ts';
import { QueryEngineMissingError, QuerySqlError } from './errors.ts';

type DuckDbModule = typeof import('@duckdb/node-api');

/** Loads the DuckDB module; tests pass a loader that fails to see the missing-install path. */
export type DuckDbLoader = () => Promise<DuckDbModule>;

export const loadDuckDb: DuckDbLoader = () => import('@duckdb/node-api');

export interface QueryEngine {
  readonly connection: DuckDBConnection;
  readonly module: DuckDbModule;
  close(): void;
}

export async function openQueryEngine(load: DuckDbLoader = loadDuckDb): Promise<QueryEngine> {
  let module: DuckDbModule;
  try {
    module = await load();
  } catch (error) {
    throw new QueryEngineMissingError({ cause: error });
  }
  // No extension is fetched from the network behind the user's back: JSON and Parquet are built in.
  const instance = await module.DuckDBInstance.create(':memory:', { autoinstall_known_extensions: 'false' });
  const connection = await instance.connect();
  return {
    connection,
    module,
    close: () => {
      connection.closeSync();
      instance.closeSync();
    },
  };
}

/** A SQL string literal. */
function literal(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

/** A SQL identifier. */
export function identifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** DuckDB expands `*`, `?` and `[` in file names; our paths have none, and one that did would be refused. */
function fileList(files: readonly LocalCommittedFile[]): string {
  for (const file of files) {
    if (/[*?[\]{}]/.test(file.path)) throw new QuerySqlError(`${file.path} would be read as a glob`);
  }
  return `[${files.map((file) => literal(file.path)).join(', ')}]`;
}

/**
 * The SELECT over the files: one `read_parquet` or `read_json` per format and folder depth, merged by column name
 * (a pipeline that changed its output format or its time folders still reads as one table). Files under time
 * folders get the folders' `dt` (and `hour`) as string columns, as the Glue table's partition keys are
 * (infra/analytics-table.ts), so the same SQL filters both; files without folders have them NULL when merged with
 * some that do. Empty files hold no rows and, for NDJSON, no columns to infer, so they are left out.
 * `union_by_name` lets files whose rows omit a nullable column still line up.
 */
function selectOver(files: readonly LocalCommittedFile[]): string | undefined {
  const groups = new Map<string, LocalCommittedFile[]>();
  for (const [index, file] of files.filter((f) => f.entry.recordCount > 0).entries()) {
    const depth = file.folder === undefined ? 0 : file.folder.split('/').length;
    // A file only partly shown (a replayed range's edge, `shared/sink/generations.ts`) is read on its own,
    // filtered by its rows' lineage offsets; there are at most two such files per replayed partition.
    const group = `${file.format} ${depth}${file.shownOffsets === undefined ? '' : ` #${index}`}`;
    groups.set(group, [...(groups.get(group) ?? []), file]);
  }
  const parts = [...groups.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([group, list]) => {
      const hive = /^\S+ 0\b/.test(group)
        ? 'hive_partitioning = false'
        : 'hive_partitioning = true, hive_types_autocast = false';
      const select =
        list[0]?.format === 'parquet'
          ? `SELECT * FROM read_parquet(${fileList(list)}, union_by_name = true, ${hive})`
          : `SELECT * FROM read_json(${fileList(list)}, format = 'newline_delimited', union_by_name = true, ${hive})`;
      const shown = list[0]?.shownOffsets;
      return shown === undefined ? select : `${select} WHERE ${offsetsIn(shown)}`;
    });
  return parts.length ? parts.join(' UNION ALL BY NAME ') : undefined;
}

/** A predicate on the lineage offset: inside one of the inclusive intervals (safe integers, so no quoting). */
function offsetsIn(spans: ReadonlyArray<readonly [number, number]>): string {
  const terms = spans.map(([from, to]) => {
    if (!Number.isSafeInteger(from) || !Number.isSafeInteger(to))
      throw new QuerySqlError('offsets out of range');
    return `(source."offset" BETWEEN ${from} AND ${to})`;
  });
  return terms.length === 0 ? 'false' : `(${terms.join(' OR ')})`;
}

/** Exposes `files` as the view `name`; with no rows at all, an empty view with just the lineage column. */
export async function createFilesView(
  engine: QueryEngine,
  name: string,
  files: readonly LocalCommittedFile[],
): Promise<void> {
  const select =
    selectOver(files) ??
    'SELECT * FROM (SELECT NULL::STRUCT(topic VARCHAR, "partition" INTEGER, "offset" BIGINT) AS source) WHERE false';
  await engine.connection.run(`CREATE VIEW ${identifier(name)} AS ${select}`);
}

export interface QueryResult {
  readonly columns: readonly string[];
  /** Rows in batches as DuckDB streams them, values JSON-ready (see {@link jsonValue}). */
  readonly batches: AsyncIterable<readonly (Json | null)[][]>;
}

const SAFE = { min: BigInt(Number.MIN_SAFE_INTEGER), max: BigInt(Number.MAX_SAFE_INTEGER) };

/**
 * DuckDB's JSON conversion, except that an integer that fits a JS number is one (`count(*)` prints `200`, not
 * `"200"`); a larger one stays a string, exactly. Timestamps, decimals and the like are DuckDB's own text.
 */
function jsonValue(module: DuckDbModule): DuckDBValueConverter<Json> {
  const converter: DuckDBValueConverter<Json> = (value, type) => {
    if (typeof value === 'bigint' && value >= SAFE.min && value <= SAFE.max) return Number(value);
    return module.JsonDuckDBValueConverter(value, type, converter);
  };
  return converter;
}

/** Runs one statement and streams its rows; DuckDB's refusal or failure is a `QuerySqlError` (its first line). */
export async function runQuery(engine: QueryEngine, sql: string): Promise<QueryResult> {
  const failed = (error: unknown) =>
    new QuerySqlError((error instanceof Error ? error.message : String(error)).split('\n')[0]!, {
      cause: error,
    });
  try {
    const statements = await engine.connection.extractStatements(sql);
    if (statements.count !== 1) {
      throw new QuerySqlError(`expected one SQL statement, got ${statements.count}`);
    }
    const result = await engine.connection.stream(sql);
    const converter = jsonValue(engine.module);
    async function* batches(): AsyncGenerator<(Json | null)[][]> {
      try {
        for await (const rows of result.yieldConvertedRows(converter)) yield rows;
      } catch (error) {
        throw failed(error);
      }
    }
    return { columns: result.columnNames(), batches: batches() };
  } catch (error) {
    if (error instanceof QuerySqlError) throw error;
    throw failed(error);
  }
}
