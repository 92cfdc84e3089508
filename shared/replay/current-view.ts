/**
 * The rows readers show after replays, as SQL over the committed objects *listed* from the bucket (what the Athena
 * table reads: it lists `final/output/` and knows nothing of manifests or generations, so after a replay it holds a
 * replayed range from both generations). The statement is the same rule as {@link GenerationView}: a row is shown
 * when its lane's generation is the one the manifest log makes current at its (epoch lane, partition, offset) —
 * generation 0 outside every switched range, the latest switch's generation inside one.
 *
 * A row's lane is in its object's key only (`topic=<lane>/partition=<p>/…` or, merged, `topic=<lane>/checkpoint=<N>/…`
 * without time folders,
 * `dt=…/<lane>+<p>+<first>-<last>.<ext>` with them); the path column is the engine's (`"$path"` in Athena,
 * `filename` in DuckDB's `read_parquet(…, filename = true)`, which the tests run it on). Only functions Athena (Trino)
 * and DuckDB both have, with the same meaning, are used.
 *
 * Free of SDK imports.
 */

import type { GenerationSwitch } from '../sink/generation-switch.ts';
import { ReplayPlanError } from '../sink/generation-switch.ts';

/** Athena refuses a statement over 262,144 bytes. */
export const MAX_VIEW_STATEMENT_BYTES = 262_144;

/** The object's lane from its key, either layout (see the module comment). */
const LANE_OF_KEY = String.raw`(?:topic=|/)([^/=+]+)(?:/partition=[0-9]+/|/checkpoint=[0-9]+/|\+[0-9]+\+)[^/]*$`;

function literal(text: string): string {
  return `'${text.replace(/'/g, "''")}'`;
}

/** The object's lane (SQL) from the path column. */
function laneOf(pathColumn: string): string {
  return `regexp_extract(${pathColumn}, ${literal(LANE_OF_KEY)}, 1)`;
}

/** The row's epoch lane (SQL): its lane without generation and redrive round (`shared/ledger/epochs.ts`). */
export function epochLaneOf(pathColumn: string): string {
  // Each pattern matches at most once and at the end: DuckDB replaces the first match only, Trino all.
  return `regexp_replace(regexp_replace(${laneOf(pathColumn)}, '~r[0-9]+$', ''), '~g[0-9]+$', '')`;
}

/** The row's generation (SQL): its lane's `~g<N>`, else 0. */
export function generationOf(pathColumn: string): string {
  // Trino's regexp_extract gives NULL without a match, DuckDB's ''; both become 0.
  return `coalesce(CAST(nullif(regexp_extract(${laneOf(pathColumn)}, '~g([0-9]+)', 1), '') AS BIGINT), 0)`;
}

/**
 * The generation shown at a row (SQL), `epochLane` its epoch lane: `switches` in manifest log order, per epoch lane
 * the latest switch's ranges first (a later switch over the same offsets wins). The epoch lane is computed once (a
 * simple CASE), so the statement grows by one short WHEN per range.
 */
export function currentGeneration(switches: readonly GenerationSwitch[], epochLane: string): string {
  const byLane = new Map<string, string[]>();
  for (const change of [...switches].reverse()) {
    for (const range of change.ranges) {
      const whens = byLane.get(range.lane) ?? [];
      whens.push(
        `WHEN source."partition" = ${range.partition} AND source."offset" BETWEEN ${range.from} AND ${range.to} THEN ${change.generation}`,
      );
      byLane.set(range.lane, whens);
    }
  }
  if (byLane.size === 0) return '0';
  const lanes = [...byLane].map(
    ([lane, whens]) => `WHEN ${literal(lane)} THEN CASE ${whens.join(' ')} ELSE 0 END`,
  );
  return `CASE ${epochLane} ${lanes.join(' ')} ELSE 0 END`;
}

/**
 * The rows shown of `source` (a table or a table function), with its columns only: no column is added, so none can
 * clash with a transform's.
 */
export function currentRowsQuery(
  source: string,
  pathColumn: string,
  switches: readonly GenerationSwitch[],
): string {
  return [
    `SELECT * FROM ${source}`,
    `WHERE ${generationOf(pathColumn)} = ${currentGeneration(switches, epochLaneOf(pathColumn))}`,
  ].join('\n');
}

export interface AthenaViewOptions {
  readonly database: string;
  readonly table: string;
  readonly view: string;
  readonly switches: readonly GenerationSwitch[];
}

/** The Glue database the construct's analytics table is in by default: `eos_<pipelineId>`, lower case, `_` for the rest. */
export function analyticsDatabaseName(pipelineId: string): string {
  return `eos_${pipelineId.toLowerCase().replace(/[^a-z0-9_]/g, '_')}`;
}

const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * `CREATE OR REPLACE VIEW` of the Athena table's rows readers show. Run it again after every switch: a view is a
 * snapshot of the manifest log's switches when it was made.
 */
export function athenaViewStatement(options: AthenaViewOptions): string {
  const source = `${quoted(options.database)}.${quoted(options.table)}`;
  const statement = [
    `CREATE OR REPLACE VIEW ${quoted(options.database)}.${quoted(options.view)} AS`,
    currentRowsQuery(source, '"$path"', options.switches),
  ].join('\n');
  const bytes = Buffer.byteLength(statement);
  if (bytes > MAX_VIEW_STATEMENT_BYTES) {
    throw new ReplayPlanError(
      `the view takes ${bytes} bytes, more than Athena's ${MAX_VIEW_STATEMENT_BYTES}: too many switched ranges for one statement (query with eos query instead)`,
    );
  }
  return statement;
}
