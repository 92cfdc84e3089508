/**
 * Fits the cost model's terms (cli/cost-model.ts) to measured counts: a batch's counts as a fixed part plus a part
 * per record, from two batch sizes; a checkpoint's as fixed, per shard, per partition, per staged file and per
 * final object, from five checkpoints of independent shapes (a linear system solved exactly). Counts are whole
 * numbers of calls, so the terms are rounded to 1e-6 to drop floating-point noise.
 */
import type { BatchTerms, CheckpointShape, CheckpointTerms } from '../cli/cost-model.ts';

/** Thrown when the measured shapes cannot tell the terms apart (two shapes proportional, say). */
export class SingularShapesError extends Error {
  override name = 'SingularShapesError';
}

const clean = (value: number) => {
  const rounded = Math.round(value * 1e6) / 1e6;
  return Object.is(rounded, -0) ? 0 : rounded;
};

/** Solves `a · x = b` (square) by Gaussian elimination with partial pivoting. */
export function solve(a: readonly (readonly number[])[], b: readonly number[]): number[] {
  const n = b.length;
  const m = a.map((row, i) => [...row, b[i]!]);
  for (let col = 0; col < n; col++) {
    let pivot = col;
    for (let row = col + 1; row < n; row++)
      if (Math.abs(m[row]![col]!) > Math.abs(m[pivot]![col]!)) pivot = row;
    if (Math.abs(m[pivot]![col]!) < 1e-12)
      throw new SingularShapesError(`no unique fit: term ${col} undetermined`);
    [m[col], m[pivot]] = [m[pivot]!, m[col]!];
    for (let row = 0; row < n; row++) {
      if (row === col) continue;
      const factor = m[row]![col]! / m[col]![col]!;
      for (let k = col; k <= n; k++) m[row]![k]! -= factor * m[col]![k]!;
    }
  }
  return m.map((row, i) => row[n]! / row[i]!);
}

/** `fixed + perRecord · records` through two measured points. */
export function fitBatch(a: { x: number; y: number }, b: { x: number; y: number }): BatchTerms {
  const perRecord = (b.y - a.y) / (b.x - a.x);
  return { fixed: clean(a.y - perRecord * a.x), perRecord: clean(perRecord) };
}

const row = (s: CheckpointShape) => [1, s.shards, s.partitions, s.stagedFiles, s.finalObjects];

/** The checkpoint terms of one quantity, from five shapes and the quantity measured at each. */
export function fitCheckpointTerms(
  shapes: readonly CheckpointShape[],
  values: readonly number[],
): CheckpointTerms {
  if (shapes.length !== 5) throw new SingularShapesError(`five shapes are needed, got ${shapes.length}`);
  const [fixed, perShard, perPartition, perStagedFile, perFinalObject] = solve(shapes.map(row), values).map(
    clean,
  );
  return {
    fixed: fixed!,
    perShard: perShard!,
    perPartition: perPartition!,
    perStagedFile: perStagedFile!,
    perFinalObject: perFinalObject!,
  };
}

/** Every operation's terms (an operation a shape did not make counts 0 there). */
export function fitCheckpointCalls(
  shapes: readonly CheckpointShape[],
  calls: readonly Record<string, number>[],
): Record<string, CheckpointTerms> {
  const operations = [...new Set(calls.flatMap((c) => Object.keys(c)))].sort();
  return Object.fromEntries(
    operations.map((op) => [
      op,
      fitCheckpointTerms(
        shapes,
        calls.map((c) => c[op] ?? 0),
      ),
    ]),
  );
}
