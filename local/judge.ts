/**
 * The verdict of a local run: reads back what it committed (the final rows, or what readers show under a replay;
 * the keyed state) and compares it with the expectation, and `eos verify`'s own check of the bucket.
 */
import type { AwsClients } from '../shared/aws/clients.ts';
import type { Settings } from '../shared/config/settings.ts';
import type { Lineage } from '../shared/kafka/record.ts';
import { epochLaneOf, parseLane } from '../shared/ledger/epochs.ts';
import { parseFinalKey, parseMergedObjectKey } from '../shared/sink/layout.ts';
import { readCommitted } from '../shared/sink/reader.ts';
import { type FinalRow, readFinalRows, type VerifyResult, verifySink } from '../shared/sink/verify.ts';
import {
  type Aggregate,
  compareOutcome,
  type Expectation,
  lineageId,
  type Outcome,
  type ResolvedExpectation,
  resolveExpectation,
} from './expectation.ts';
import { readAggregates } from './results.ts';
import type { RunOptions } from './run-options.ts';
import type { RedriveReport } from './run-report.ts';

export function violationsOf(outcome: Outcome, verify: VerifyResult): string[] {
  const violations: string[] = [];
  if (outcome.lost > 0) violations.push(`${outcome.lost} lost`);
  if (outcome.duplicated > 0) violations.push(`${outcome.duplicated} duplicated`);
  if (outcome.unexpected > 0) violations.push(`${outcome.unexpected} unexpected rows`);
  if (!outcome.aggregatesMatch) violations.push('aggregates differ from the deduplicated input');
  if (!verify.ok) violations.push(`eos verify failed (${verify.problems.length} problems)`);
  return violations;
}

/** Both streams as the committed reader shows them (`shared/sink/generations.ts`), as final rows. */
async function readerRows(s3: AwsClients['s3'], settings: Settings): Promise<FinalRow[]> {
  const rows: FinalRow[] = [];
  for (const stream of ['output', 'deadletter'] as const) {
    for await (const { file, row } of readCommitted({
      s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
      stream,
    })) {
      rows.push({ key: file.key, stream, row, topic: file.topic });
    }
  }
  return rows;
}

export function redriveViolations(report: RedriveReport | undefined): string[] {
  if (report === undefined || report.secondRunStaged === 0) return [];
  return [`a second redrive staged ${report.secondRunStaged} rows again`];
}

/**
 * Reads what the run left behind and judges it against the input. `stateOf`, when given, is the expectation whose
 * keyed state the ledger must hold (a replay's: the run's, not the view's).
 */
export async function judge(
  clients: AwsClients,
  options: RunOptions,
  expectation: Expectation,
  stateOf = expectation,
) {
  const { settings } = options;
  const pipeline = settings.pipelineId;
  const s3 = clients.s3;
  // A replay scenario is judged on what readers show (one generation per record); others on every final object.
  const rows: FinalRow[] = options.replayWith
    ? await readerRows(s3, settings)
    : await readFinalRows({ s3, bucket: settings.bucket, pipeline });
  const laned = rows.flatMap(({ key, stream, row, topic }) => {
    const source = row.source as { topic: string; partition: number; offset: number } | undefined;
    // Judged per epoch: a row counts under the lane its object names (its own topic in epoch 0); a redriven row
    // under the lane of the dead letter it redrove, ranked by its round. A merged object's key names its lane as
    // its slices' manifest entries do (an unlisted or wrongly sliced one too).
    const name =
      topic ??
      parseFinalKey(pipeline, key)?.topic ??
      parseMergedObjectKey(pipeline, key)?.topic ??
      source?.topic ??
      '';
    const lane = parseLane(name);
    if (!source || !lane) return [];
    return [{ stream, source: { ...source, topic: epochLaneOf(name) }, round: lane.round ?? 0 }];
  });
  // Which record of a key group won is the rows' to say (within what the rules allow): resolved from them.
  const shown = resolveExpectation(expectation, laned);
  const resolved: ResolvedExpectation =
    stateOf === expectation ? shown : { ...shown, aggregates: resolveExpectation(stateOf, laned).aggregates };
  const committedRows = options.redriveWith ? latestOutcomes(laned, resolved) : laned;
  const aggregates: Map<string, Aggregate> = await readAggregates(
    clients,
    settings.ledgerTable,
    settings.pipelineId,
    new Set([...stateOf.stateKeys, ...resolved.aggregates.keys()]),
  );
  const outcome = compareOutcome(resolved, committedRows, aggregates);
  const verify = await verifySink({ s3, bucket: settings.bucket, pipeline });
  return { rows, aggregates, outcome, verify, resolved };
}

/**
 * The redrive scenario judges each record by its latest outcome (the dead letters themselves are never rewritten:
 * the committed log keeps them). A dead letter is superseded by a dead letter of a later redrive round, and by an
 * output row of the same identity: the record itself redriven, or the record whose key it duplicates (a redriven
 * duplicate is dropped by its key, as the fixed transform would have dropped it from the start).
 */
function latestOutcomes<T extends { stream: string; source: Lineage; round: number }>(
  rows: readonly T[],
  expectation: ResolvedExpectation,
): T[] {
  const lineage = (row: T) => lineageId(row.source);
  const identity = (row: T) => expectation.identityOf.get(lineage(row)) ?? `lineage:${lineage(row)}`;
  const output = new Set(rows.filter((row) => row.stream === 'output').map(identity));
  const lastRound = new Map<string, number>();
  for (const row of rows) {
    if (row.stream === 'deadletter')
      lastRound.set(lineage(row), Math.max(lastRound.get(lineage(row)) ?? -1, row.round));
  }
  return rows.filter(
    (row) =>
      row.stream === 'output' || (!output.has(identity(row)) && row.round === lastRound.get(lineage(row))),
  );
}
