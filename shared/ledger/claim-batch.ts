/**
 * Claims created in batches (P4): PartiQL `INSERT` statements, up to {@link MAX_BATCH_STATEMENTS} per
 * BatchExecuteStatement. An INSERT creates its item only if no item has its key, and fails on its own
 * (`DuplicateItem`) otherwise, whatever the other statements of the call do: each key is still decided by its own
 * condition, as a conditional put would. The batch only ever creates; every key it did not create (an existing
 * claim: the record's own, another record's, an expired one; or a statement that failed for any other reason) is
 * left to the caller's per-key create-or-confirm write (`claim-items.ts`), which decides it as it always did.
 */
import { BatchExecuteStatementCommand } from '@aws-sdk/lib-dynamodb';
import { send, type TableRef } from '../aws/dynamo.ts';
import type { ItemKey } from './layout.ts';
import { distinctBatches, PartiqlRefusal } from './partiql-batches.ts';
import type { ClaimItem } from './records.ts';

export { MAX_BATCH_STATEMENTS } from './partiql-batches.ts';

/** BatchExecuteStatement calls in flight at once: a 500-record batch makes 20. */
const BATCH_CONCURRENCY = 8;

/** A claim to create: its item key and the claim, listing `attemptId` as its only holder. */
export interface ClaimInsert {
  readonly key: ItemKey;
  readonly claim: ClaimItem;
}

/** What the batches did: claims created, and claims left to the per-key write. */
export interface InsertedClaims {
  readonly created: ClaimInsert[];
  readonly undecided: ClaimInsert[];
  /** Repeats of a key listed earlier: decided after the first of their key (`claim-items.ts`). */
  readonly repeats: ClaimInsert[];
}

/** Told of each claim as it is created (or confirmed), so a failure later in the call still knows it held it. */
export type OnHeld = (claim: ClaimItem) => void;

/**
 * The INSERT of a claim: exactly the attributes the per-key write creates (pk, sk, idempotencyKey, claimant,
 * digest, expiresAt, and holders as a string set), as parameters (the document client marshals the Set to SS).
 * Table names cannot hold a double quote, so quoting the name is enough.
 */
export function claimInsertStatement(table: string, { key, claim }: ClaimInsert, attemptId: string) {
  return {
    Statement:
      `INSERT INTO "${table}" VALUE {'pk': ?, 'sk': ?, 'idempotencyKey': ?, 'claimant': ?, 'digest': ?, ` +
      `'expiresAt': ?, 'holders': ?}`,
    Parameters: [
      key.pk,
      key.sk,
      claim.idempotencyKey,
      claim.claimant,
      claim.digest,
      claim.expiresAt,
      new Set([attemptId]),
    ],
  };
}

/**
 * Whether this container's role was refused an INSERT (`AccessDenied` on a statement). The processor role is granted
 * `dynamodb:PartiQLInsert` on claim keys only, on condition the request names its key (`infra/ledger-access.ts`);
 * should IAM not give PartiQL requests that key, every INSERT is refused. Claims then go through the per-key
 * update, which needs no PartiQL (the cost of one call per record, said once per container on stderr), and no
 * further INSERT is sent from this container: the pipeline runs, at the old cost, rather than stopping.
 */
const insertRefusal = new PartiqlRefusal(
  (message) =>
    'claims ahead fall back to one UpdateItem per key: the role may not PartiQLInsert claims ' +
    `(${message}); grant dynamodb:PartiQLInsert on the ledger's claim keys to batch them`,
);

/** Forgets a refusal (a new container's memory). */
export function forgetClaimInsertRefusal(): void {
  insertRefusal.forget();
}

/** Whether INSERTs of claims were refused in this container (see {@link forgetClaimInsertRefusal}). */
export function claimInsertsRefused(): boolean {
  return insertRefusal.isRefused;
}

/** How one batch's statements came out: created, or left to the per-key write. */
function sortResponses(
  batch: readonly ClaimInsert[],
  responses: readonly { Error?: { Code?: string; Message?: string } }[],
  result: InsertedClaims,
  onHeld: OnHeld,
): void {
  let denied: string | undefined;
  batch.forEach((insert, i) => {
    const response = responses[i];
    // A response missing for a statement says nothing of it: the per-key write decides it.
    if (response !== undefined && response.Error === undefined) {
      result.created.push(insert);
      onHeld(insert.claim);
      return;
    }
    if (response?.Error?.Code === 'AccessDenied') denied ??= response.Error.Message ?? 'access denied';
    result.undecided.push(insert);
  });
  if (denied !== undefined) insertRefusal.refuse(denied);
}

/**
 * Creates the claims that are absent, in batches. A call that fails as a whole is classified as `send` does (a
 * transient failure fails the invocation for the mapping's retry); once one has failed no further call starts,
 * and the failure is thrown once the calls in flight have ended. A statement that failed on its own is left
 * `undecided`: for `DuplicateItem` (the item exists), and for any other reason (throttled, a conflict, an internal
 * error, `AccessDenied`), since the per-key write retries and classifies it as before.
 */
export async function insertClaims(
  at: TableRef,
  inserts: readonly ClaimInsert[],
  attemptId: string,
  onHeld: OnHeld = () => {},
): Promise<InsertedClaims> {
  const { batches, repeats } = distinctBatches(inserts, (insert) => insert.key);
  if (insertRefusal.isRefused) return { created: [], undecided: batches.flat(), repeats };
  const result: InsertedClaims = { created: [], undecided: [], repeats };
  let next = 0;
  let failure: { error: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (next < batches.length && !failure) {
      const batch = batches[next++]!;
      if (insertRefusal.isRefused) {
        result.undecided.push(...batch);
        continue;
      }
      try {
        const output = await send(
          at.doc,
          new BatchExecuteStatementCommand({
            Statements: batch.map((insert) => claimInsertStatement(at.table, insert, attemptId)),
          }),
          'dynamodb:BatchExecuteStatement(claims)',
          { missingTable: at.table },
        );
        sortResponses(batch, output.Responses ?? [], result, onHeld);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(BATCH_CONCURRENCY, batches.length) }, worker));
  if (failure) throw failure.error;
  return result;
}
