/**
 * A small seeded PRNG (mulberry32 over a splitmix32-mixed seed). Fault schedules and the generator draw from it, so
 * the same seed gives the same schedule and the same input. `fork(label)` derives an independent stream, so that
 * adding a draw in one place (say, the generator) does not shift every later draw elsewhere (the faults).
 */
export interface Random {
  /** A float in [0, 1). */
  next(): number;
  /** An integer in [0, n). */
  int(n: number): number;
  /** True with probability p. */
  chance(p: number): boolean;
  pick<T>(items: readonly T[]): T;
  /** An independent stream derived from this seed and a label. */
  fork(label: string): Random;
}

function mix32(x: number): number {
  let z = (x + 0x9e3779b9) | 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

function hashLabel(seed: number, label: string): number {
  let h = mix32(seed);
  for (let i = 0; i < label.length; i++) h = mix32(h ^ label.charCodeAt(i));
  return h;
}

export function seededRandom(seed: number): Random {
  const origin = seed >>> 0;
  let state = mix32(origin);
  const next = (): number => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const random: Random = {
    next,
    int: (n) => Math.floor(next() * n),
    chance: (p) => p > 0 && next() < p,
    pick: <T>(items: readonly T[]): T => {
      if (items.length === 0) throw new RangeError('pick from an empty list');
      return items[Math.floor(next() * items.length)]!;
    },
    fork: (label) => seededRandom(hashLabel(origin, label)),
  };
  return random;
}
