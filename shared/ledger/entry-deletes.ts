/**
 * Staged entries deleted in batches of PartiQL `DELETE` statements, up to 25 (`MAX_BATCH_STATEMENTS`) per
 * BatchExecuteStatement. Each statement keeps the condition the transactional delete has (the entry still names the
 * object that was promoted), and is decided on its own: DynamoDB refuses only that statement
 * (`ConditionalCheckFailed`) when the condition is false, and answers success, deleting nothing, when the item is
 * already gone. A batch statement is billed as the single write it is: one write unit for an entry under 1 KB,
 * where a transaction bills two. Cleanup deletes one entry per staged file, so this halves its share of the
 * ledger's write bill.
 *
 * Every delete a batch does not decide (a statement refused for any other reason, or a response missing) is
 * returned to the caller, which sends it the transactional way as before.
 */
import { BatchExecuteStatementCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { send } from '../aws/dynamo.ts';
import { mapLimit } from '../concurrency.ts';
import type { InlineAt } from './inline-entries.ts';
import type { ItemKey } from './layout.ts';
import { distinctBatches, PartiqlRefusal } from './partiql-batches.ts';

/**
 * A staged entry to delete where it lies: the item at `at` (`key`: only while it still names that object), or the
 * attribute `inline` of a fence item (`inline-entries.ts`); with `orItem`, whichever of the two holds it.
 */
export interface DeleteTarget {
  readonly at: ItemKey;
  readonly key?: string;
  readonly inline?: InlineAt;
  readonly orItem?: boolean;
}

/** What the batches did: deletes done, refused by their condition, and left to the caller. */
export interface BatchedDeletes {
  /**
   * Statements that succeeded. DynamoDB documents a delete of an absent item as a success; DynamoDB Local refuses
   * its condition instead. Either way nothing was deleted twice: the count is for logs only.
   */
  readonly deleted: number;
  readonly refused: number;
  readonly undecided: DeleteTarget[];
}

/**
 * Whether this container's role was refused a PartiQL DELETE (`AccessDenied` on a statement). The coordinator's
 * cleanup is granted `dynamodb:PartiQLDelete` on staged entries only, on condition the request names its key
 * (`infra/checkpoint-coordinator.ts`); should IAM not give PartiQL requests that key, every statement is refused,
 * and the container deletes by transaction from then on (said once on stderr) rather than stopping.
 */
const deleteRefusal = new PartiqlRefusal(
  (message) =>
    'cleanup deletes staged entries by transaction (two write units each): the role may not PartiQLDelete ' +
    `them (${message}); grant dynamodb:PartiQLDelete on the ledger's staged entries to batch them`,
);

/** Forgets a refusal (a new container's memory). */
export function forgetEntryDeleteRefusal(): void {
  deleteRefusal.forget();
}

/** Whether PartiQL deletes of staged entries were refused in this container. */
export function entryDeletesRefused(): boolean {
  return deleteRefusal.isRefused;
}

/** A batch refused as a whole: its statements' form, or the action, is not allowed for this account or role. */
class StatementsRefusedError extends Error {}

const REFUSED_AS_A_WHOLE = new Set(['ValidationException', 'AccessDeniedException']);

function refusedAsAWhole(error: unknown): void {
  const name = (error as { name?: unknown }).name;
  if (typeof name === 'string' && REFUSED_AS_A_WHOLE.has(name))
    throw new StatementsRefusedError(`${name}: ${(error as Error).message}`);
}

/**
 * The DELETE of one target, its key and condition as parameters. Table names cannot hold a double quote, so
 * quoting the name is enough; `key` is quoted as an attribute name, as every name is.
 */
export function entryDeleteStatement(table: string, target: DeleteTarget) {
  const { pk, sk } = target.at;
  return target.key === undefined
    ? { Statement: `DELETE FROM "${table}" WHERE "pk" = ? AND "sk" = ?`, Parameters: [pk, sk] }
    : {
        Statement: `DELETE FROM "${table}" WHERE "pk" = ? AND "sk" = ? AND "key" = ?`,
        Parameters: [pk, sk, target.key],
      };
}

/**
 * Deletes `targets` in batches, `concurrency` calls in flight. A call refused as a whole as invalid or not allowed
 * returns its targets undecided and refuses PartiQL for the container (see {@link forgetEntryDeleteRefusal});
 * any other failure of a call is thrown as `send` classifies it (the step's retry sends the deletes again).
 * Once refused, nothing is sent and every target is returned undecided.
 */
export async function deleteEntriesInBatches(
  documents: DynamoDBDocumentClient,
  table: string,
  targets: readonly DeleteTarget[],
  concurrency = 4,
): Promise<BatchedDeletes> {
  if (deleteRefusal.isRefused) return { deleted: 0, refused: 0, undecided: [...targets] };
  const { batches, repeats } = distinctBatches(targets, (target) => target.at);
  let deleted = 0;
  let refused = 0;
  const undecided: DeleteTarget[] = [...repeats];
  await mapLimit(batches, concurrency, async (batch) => {
    let responses: ReadonlyArray<{ Error?: { Code?: string; Message?: string } }>;
    try {
      const result = await send(
        documents,
        new BatchExecuteStatementCommand({
          Statements: batch.map((target) => entryDeleteStatement(table, target)),
        }),
        'dynamodb:BatchExecuteStatement(delete staged entries)',
        { explain: refusedAsAWhole },
      );
      responses = result.Responses ?? [];
    } catch (error) {
      if (!(error instanceof StatementsRefusedError)) throw error;
      // The transactions, which cleanup has always used, still delete; the container stops sending PartiQL.
      deleteRefusal.refuse(error.message);
      undecided.push(...batch);
      return;
    }
    let denied: string | undefined;
    batch.forEach((target, i) => {
      const response = responses[i];
      const code = response?.Error?.Code;
      if (response !== undefined && response.Error === undefined) deleted++;
      else if (code === 'ConditionalCheckFailed') refused++;
      else {
        if (code === 'AccessDenied') denied ??= response?.Error?.Message ?? 'access denied';
        undecided.push(target);
      }
    });
    if (denied !== undefined) deleteRefusal.refuse(denied);
  });
  return { deleted, refused, undecided };
}
