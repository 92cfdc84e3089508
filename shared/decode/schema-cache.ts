/**
 * The cache in front of a registry's lookups, with the limits that keep a producer's choice of schema ids from
 * flooding the registry or stalling a partition:
 *
 * - a found schema is cached for the life of the process (ids are immutable in both registries);
 * - a missing one — not found, or refused by the registry (a 4xx, Glue's AccessDenied) — is remembered for
 *   `negativeTtlMs`, at most `negativeCacheSize` of them, the oldest forgotten first: a producer may register an
 *   id a moment before the replica asked has it, and ids a producer makes up must not grow the cache;
 * - one `fetch` looks up at most `maxLookupsPerFetch` uncached ids (in the order given), `maxInFlight` at a time;
 *   the ids past the limit are not looked up and their records dead-letter as unknown (a later batch may have
 *   them: they are not remembered as missing);
 * - each answer is kept as it arrives, so a failed lookup does not throw away the others: the retried batch asks
 *   only for what is still unknown. After a transient failure no further lookup starts (a throttling registry is
 *   not hammered); the ones in flight finish, then `fetch` throws the failure.
 */
import type { RegisteredSchema, SchemaLoader, SchemaMiss } from './registry.ts';

/** A lookup that found no schema, as reported to {@link CacheOptions.onMiss} (once per lookup, not per record). */
export interface SchemaLookupMiss {
  readonly id: string | number;
  /** `not-found`: the registry does not have it; `refused`: it would not say; `over-limit`: not looked up. */
  readonly outcome: SchemaMiss['miss'] | 'over-limit';
  readonly detail: string;
}

/** The outcome of {@link SchemaCache.get}. */
export type Lookup =
  | { readonly state: 'found'; readonly schema: RegisteredSchema }
  | { readonly state: 'not-found'; readonly detail: string }
  | { readonly state: 'over-limit' }
  | { readonly state: 'not-fetched' };

export const DEFAULT_NEGATIVE_TTL_MS = 30_000;
export const DEFAULT_NEGATIVE_CACHE_SIZE = 1_000;
export const DEFAULT_MAX_LOOKUPS_IN_FLIGHT = 8;
export const DEFAULT_MAX_LOOKUPS_PER_FETCH = 50;

export interface CacheOptions {
  readonly now?: () => number;
  readonly negativeTtlMs?: number;
  readonly negativeCacheSize?: number;
  readonly maxInFlight?: number;
  readonly maxLookupsPerFetch?: number;
  /** Told of every lookup that found no schema (for a metric); an error it throws is ignored. */
  readonly onMiss?: (miss: SchemaLookupMiss) => void;
}

export class SchemaCache<K extends string | number> {
  private readonly found = new Map<K, RegisteredSchema>();
  /** Missing ids in the order they were (last) answered: the first is the one forgotten next. */
  private readonly missing = new Map<K, { readonly at: number; readonly detail: string }>();
  private overLimit = new Set<K>();
  private readonly now: () => number;
  private readonly limits: Required<Omit<CacheOptions, 'now' | 'onMiss'>>;

  constructor(
    private readonly load: SchemaLoader<K>,
    private readonly options: CacheOptions = {},
  ) {
    this.now = options.now ?? Date.now;
    this.limits = {
      negativeTtlMs: options.negativeTtlMs ?? DEFAULT_NEGATIVE_TTL_MS,
      negativeCacheSize: atLeastOne(options.negativeCacheSize ?? DEFAULT_NEGATIVE_CACHE_SIZE),
      maxInFlight: atLeastOne(options.maxInFlight ?? DEFAULT_MAX_LOOKUPS_IN_FLIGHT),
      maxLookupsPerFetch: atLeastOne(options.maxLookupsPerFetch ?? DEFAULT_MAX_LOOKUPS_PER_FETCH),
    };
  }

  /** Looks up the ids not cached (or whose "missing" expired), within the limits; throws the first transient failure. */
  async fetch(ids: Iterable<K>): Promise<void> {
    const stale = [...new Set(ids)].filter((id) => this.stale(id));
    const wanted = stale.slice(0, this.limits.maxLookupsPerFetch);
    this.overLimit = new Set(stale.slice(this.limits.maxLookupsPerFetch));
    for (const id of this.overLimit) {
      this.report({ id, outcome: 'over-limit', detail: 'over the lookups of one batch' });
    }
    let next = 0;
    let failed: { readonly error: unknown } | undefined;
    const worker = async (): Promise<void> => {
      while (failed === undefined && next < wanted.length) {
        const id = wanted[next++]!;
        try {
          this.keep(id, await this.load(id));
        } catch (error) {
          failed ??= { error };
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.limits.maxInFlight, wanted.length) }, worker));
    if (failed !== undefined) throw failed.error;
  }

  get(id: K): Lookup {
    const schema = this.found.get(id);
    if (schema !== undefined) return { state: 'found', schema };
    const missing = this.missing.get(id);
    if (missing !== undefined) return { state: 'not-found', detail: missing.detail };
    return this.overLimit.has(id) ? { state: 'over-limit' } : { state: 'not-fetched' };
  }

  private keep(id: K, answer: RegisteredSchema | SchemaMiss): void {
    if (!('miss' in answer)) {
      this.found.set(id, answer);
      this.missing.delete(id);
      return;
    }
    this.missing.delete(id);
    this.missing.set(id, { at: this.now(), detail: answer.detail });
    for (const oldest of this.missing.keys()) {
      if (this.missing.size <= this.limits.negativeCacheSize) break;
      this.missing.delete(oldest);
    }
    this.report({ id, outcome: answer.miss, detail: answer.detail });
  }

  private report(miss: SchemaLookupMiss): void {
    try {
      this.options.onMiss?.(miss);
    } catch {
      // A metric that cannot be counted must not fail the batch (it would be retried forever).
    }
  }

  private stale(id: K): boolean {
    if (this.found.has(id)) return false;
    const missing = this.missing.get(id);
    return missing === undefined || this.now() - missing.at >= this.limits.negativeTtlMs;
  }
}

function atLeastOne(limit: number): number {
  return Number.isNaN(limit) ? 1 : Math.max(1, Math.floor(limit));
}
