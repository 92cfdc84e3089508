export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The nearest-rank percentile (`p` in 0..100): the smallest value with at least p % of the values at or below it. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) throw new RangeError('no values');
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[Math.min(rank, sorted.length) - 1]!;
}

/** Run-to-run spread: the smallest, the median and the largest of the runs. */
export interface Spread {
  min: number;
  median: number;
  max: number;
}

export function spreadOf(values: readonly number[], digits = 0): Spread {
  if (values.length === 0) throw new RangeError('no values');
  const round = (value: number) => Number(value.toFixed(digits));
  return {
    min: round(Math.min(...values)),
    median: round(median(values)),
    max: round(Math.max(...values)),
  };
}
