/** How the benchmark page writes its figures: calls per operation, a spread of runs, a target's verdict. */
import type { Spread } from './stats.ts';

export function calls(record: Record<string, number>): string {
  return (
    Object.entries(record)
      .map(([operation, n]) => `${operation} ${Number(n.toFixed(2))}`)
      .join(', ') || '—'
  );
}

export function spread(s: Spread, unit = ''): string {
  return s.min === s.max ? `${s.median}${unit}` : `${s.median}${unit} (${s.min}–${s.max})`;
}

export function round1(value: number): number {
  return Number(value.toFixed(1));
}

export function verdict(met: boolean): string {
  return met ? 'met' : '**missed** (explained below)';
}
