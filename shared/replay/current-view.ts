/**
 * The rows readers show after replays, as SQL over the committed objects *listed* from the bucket (what the Athena
 * table reads: it lists `final/output/` and knows nothing of manifests or generations, so after a replay it holds a
 * replayed range from both generations). The statement is the same rule as {@link GenerationView}: a row is shown
 * when its lane's generation is the one the manifest log makes current at its (epoch lane, partition, offset) —
 * generation 0 outside every switched range, the latest switch's generation inside one.
 *
 * A row's lane is in its object's key only (`topic=<lane>/partition=<p>/…` without time folders,
 * `dt=…/<lane>+<p>+<first>-<last>.<ext>` with them); the path column is the engine's (`"$path"` in Athena,
 * `filename` in DuckDB's `read_parquet(…, filename = true)`, which the tests run it on). Only functions Athena (Trino)
 * and DuckDB both have, with the same meaning, are used.
 *
 * Free of SDK imports.
 */

import type { GenerationSwitch } from './plan.ts';
import { ReplayPlanError } from './plan.ts';

/** Athena refuses a statement over 262,144 bytes. */
export const MAX_VIEW_STATEMENT_BYTES = 262_144;

/** The object's lane from its key, either layout (see the module comment). */
const LANE_OF_KEY = String.raw`(?:topic=|/)([^/=+]+)(?:/partition=[0-9]+/|\+[0-9]+\+)[^/]*$`;

function literal(text: string): string {
  return `'${text.replace(/'/g, "''")}'`;
}

/**
 * The columns the statement adds to each row, from `pathColumn`: `eos_epoch_lane` (the lane without its generation
 * and redrive round, `shared/ledger/epochs.ts`) and `eos_generation` (0 without `~g<N>`).
 */
export function laneColumns(pathColumn: string): string {
  const lane = `regexp_extract(${pathColumn}, ${literal(LANE_OF_KEY)}, 1)`;
  // Each pattern matches at most once and at the end: DuckDB replaces the first match only, Trino all.
  const epochLane = `regexp_replace(regexp_replace(${lane}, '~r[0-9]+$', ''), '~g[0-9]+$', '')`;
  // Trino's regexp_extract gives NULL without a match, DuckDB's ''; both become 0.
  const generation = `coalesce(CAST(nullif(regexp_extract(${lane}, '~g([0-9]+)', 1), '') AS BIGINT), 0)`;
  return `${epochLane} AS eos_epoch_lane, ${generation} AS eos_generation`;
}

/**
 * The generation shown at a row (`eos_epoch_lane`, `source.partition`, `source.offset`): `switches` in manifest log
 * order, the latest first in the CASE (a later switch over the same offsets wins).
 */
export function currentGeneration(switches: readonly GenerationSwitch[]): string {
  const whens = [...switches]
    .reverse()
    .flatMap((change) =>
      change.ranges.map(
        (range) =>
          `WHEN eos_epoch_lane = ${literal(range.lane)} AND source."partition" = ${range.partition} AND source."offset" BETWEEN ${range.from} AND ${range.to} THEN ${change.generation}`,
      ),
    );
  return whens.length === 0 ? '0' : `CASE ${whens.join(' ')} ELSE 0 END`;
}

/** `SELECT` of the rows shown from `source` (a table or a table function), with the two lane columns. */
export function currentRowsQuery(
  source: string,
  pathColumn: string,
  switches: readonly GenerationSwitch[],
): string {
  return [
    `SELECT * FROM (SELECT *, ${laneColumns(pathColumn)} FROM ${source})`,
    `WHERE eos_generation = ${currentGeneration(switches)}`,
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
