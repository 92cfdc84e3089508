/**
 * What the ledger's PartiQL batches share (claims created ahead, `claim-batch.ts`; staged entries deleted by
 * cleanup, `entry-deletes.ts`): statements grouped into BatchExecuteStatement calls, and the container's memory
 * of a role that may not send them.
 */
import type { ItemKey } from './layout.ts';

/** DynamoDB's limit on the statements of one BatchExecuteStatement. */
export const MAX_BATCH_STATEMENTS = 25;

/**
 * Batches of at most {@link MAX_BATCH_STATEMENTS} items with distinct item keys (DynamoDB refuses a whole call that
 * names one item twice), in order; each later item naming a key already listed is a repeat, left to the caller.
 */
export function distinctBatches<T>(
  items: readonly T[],
  keyOf: (item: T) => ItemKey,
): { batches: T[][]; repeats: T[] } {
  const seen = new Set<string>();
  const distinct: T[] = [];
  const repeats: T[] = [];
  for (const item of items) {
    const { pk, sk } = keyOf(item);
    const id = `${pk}\u0000${sk}`;
    if (seen.has(id)) repeats.push(item);
    else {
      seen.add(id);
      distinct.push(item);
    }
  }
  const batches: T[][] = [];
  for (let i = 0; i < distinct.length; i += MAX_BATCH_STATEMENTS)
    batches.push(distinct.slice(i, i + MAX_BATCH_STATEMENTS));
  return { batches, repeats };
}

/**
 * A container's memory that its role was refused a kind of PartiQL statement: once refused, the caller sends none
 * and takes its item-API path, and the refusal is said once on stderr (`warning` names the fallback and the grant).
 * Module-level in each user, as a Lambda container's memory is; `forget` is a new container's.
 */
export class PartiqlRefusal {
  private refused = false;

  constructor(private readonly warning: (message: string) => string) {}

  get isRefused(): boolean {
    return this.refused;
  }

  refuse(message: string): void {
    if (this.refused) return;
    this.refused = true;
    process.stderr.write(`${JSON.stringify({ level: 'WARN', message: this.warning(message) })}\n`);
  }

  forget(): void {
    this.refused = false;
  }
}
