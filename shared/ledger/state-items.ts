/**
 * Keyed-state items: the transform's per-key deltas as DynamoDB updates (`state-update.ts`: SET of fields, ADD of
 * numbers, min, max and latest on conditions), applied inside the staging transaction (EXACTLY_ONCE) or on their
 * own ({@link applyState}: AT_LEAST_ONCE and NONE), and the errors that name the state keys DynamoDB refused,
 * which the processor resolves record by record.
 */
import { GetCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { cancellationReasons, isLimitExceeded } from '../aws/classify.ts';
import { MAX_TRANSACTION_ITEMS, send, type TableRef } from '../aws/dynamo.ts';
import { ItemLimitExceededError, PipelineError } from '../errors.ts';
import type { StateDelta } from '../transforms/types.ts';
import { keys } from './layout.ts';
import { plainItem } from './state-fields.ts';
import { beliefsOf, learn } from './state-knowledge.ts';
import { believeCommitted, guessesFor, planOf, stateItem } from './state-update.ts';

export { believeCommitted, stateItem };

/**
 * DynamoDB refused an ADD because the state field it adds to holds something other than a number (a field set as
 * text by an earlier record, in an earlier chunk or batch). `stateKeys` are the state keys that may hold it: the
 * refused items when DynamoDB names them, else every state key of the transaction. Deterministic: the processor
 * dead-letters the records whose adds meet a non-number (see `StagingLedger.readState`) and stages the rest.
 */
export class StateTypeConflictError extends PipelineError {
  constructor(
    readonly stateKeys: readonly string[],
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(`state ADD to a field that is not a number (${stateKeys.join(', ')}): ${detail}`, options);
  }
}

/**
 * DynamoDB refused keyed-state items as larger than its item limit (400 KB): an item grown over many records that
 * set new field names. `stateKeys` are the refused items when DynamoDB names them, else every state key of the
 * transaction. The processor dead-letters the records that would take an item past the limit and stages the rest
 * (`processor/state-size.ts`); when none would, it stops the partition with this error, as any item limit.
 */
export class StateItemTooLargeError extends ItemLimitExceededError {
  constructor(
    topic: string,
    partition: number,
    readonly stateKeys: readonly string[],
    items: readonly string[],
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(topic, partition, items, detail, options);
  }
}

/**
 * The conditions of min, max or latest fields did not hold: the stored item is not as this container believed it
 * (another writer moved a field, or it was changed behind the pipeline), or a field holds another operation than
 * the update's. Nothing of the transaction was applied. `stored` holds each refused item as the refusal returned
 * it (undefined: no item), which the ledger has learnt; `learnt` says whether the update, sent again, would differ.
 * The processor dead-letters the records whose operation meets a field of another (`processor/state-refusal.ts`)
 * and stages the chunk again; a refusal that teaches nothing and names no such record fails the batch.
 */
export class StateConditionError extends PipelineError {
  constructor(
    readonly stateKeys: readonly string[],
    readonly stored: ReadonlyMap<string, Record<string, unknown> | undefined>,
    readonly learnt: boolean,
    options?: { cause?: unknown; turned?: readonly string[] },
  ) {
    super(
      `keyed state is not as the update's conditions say (${stateKeys.join(', ')}): a min, max or latest field ` +
        'was moved by another writer, or a field holds another operation',
      { cause: options?.cause },
    );
    this.turned = options?.turned ?? [];
  }

  /**
   * The fields (`<state key>\u0000<field>`) the refusal turned from an `apply` guess to a `skip`: the stored field
   * was found ahead of the value sent. Within the protocol a field turns once per chunk (a stored field only moves
   * on, so the `skip` stays right), which is what tells a refusal that makes progress from one that repeats.
   */
  readonly turned: readonly string[];
}

/** DynamoDB's words for an ADD (or another operand) meeting an attribute of the wrong type. */
const WRONG_TYPE = /incorrect (operand|data) type|operand type/i;

/** What names a refusal of keyed-state items: the partition and the transaction's folded deltas. */
export interface StateRefusalContext {
  readonly topic: string;
  readonly partition: number;
  readonly state: readonly StateDelta[];
}

/** AT_LEAST_ONCE / NONE: one chunk's keyed-state deltas of a partition, applied without fence (see applyState). */
export interface DirectStateTransaction extends StateRefusalContext {
  readonly pipeline: string;
}

/** A transaction of more items than DynamoDB takes: a defect of the planner, named, never retried. */
export function tooManyItems(context: StateRefusalContext, items: number): ItemLimitExceededError {
  return new ItemLimitExceededError(
    context.topic,
    context.partition,
    [`${items} transaction items`],
    `more than DynamoDB's ${MAX_TRANSACTION_ITEMS} items in one transaction`,
  );
}

/**
 * What a refusal of the conditions of these state items teaches: each item as returned, learnt as what the table
 * holds, and whether the updates' guesses differ now (`state-update.ts`).
 */
function conditionRefusal(
  refused: ReadonlyArray<{ delta: StateDelta; item: Record<string, unknown> | undefined }>,
  error: unknown,
): StateConditionError {
  const stored = new Map<string, Record<string, unknown> | undefined>();
  const turned: string[] = [];
  let learnt = false;
  for (const { delta, item } of refused) {
    stored.set(delta.key, item);
    const plan = planOf(delta);
    if (plan === undefined) continue;
    learn(plan.table, plan.pipeline, delta.key, item);
    const next = guessesFor(delta, beliefsOf(plan.table, plan.pipeline, delta.key));
    for (const [field, { guess }] of plan.guesses) {
      const now = next.get(field)?.guess;
      if (now !== guess) learnt = true;
      if (guess === 'apply' && now === 'skip') turned.push(`${delta.key}\u0000${field}`);
    }
  }
  return new StateConditionError([...stored.keys()], stored, learnt, { cause: error, turned });
}

/**
 * A cancelled transaction whose keyed-state items (its last `txn.state.length` items) DynamoDB refused: an ADD
 * meeting a field that is not a number, a min, max or latest condition that did not hold, or an item over a limit.
 * Anything else is left to the caller.
 */
export function explainStateCancellation(
  txn: StateRefusalContext,
  reasons: ReadonlyArray<{ Code?: string; Message?: string; Item?: Record<string, unknown> }>,
  labels: readonly string[],
  error: unknown,
): void {
  const stateStart = labels.length - txn.state.length;
  const wrongType = txn.state.filter((_, i) => {
    const reason = reasons[stateStart + i];
    return reason?.Code === 'ValidationError' && WRONG_TYPE.test(reason.Message ?? '');
  });
  if (wrongType.length > 0) {
    throw new StateTypeConflictError(
      wrongType.map((delta) => delta.key),
      'ValidationError',
      { cause: error },
    );
  }
  const conditions = txn.state.flatMap((delta, i) => {
    const reason = reasons[stateStart + i];
    if (reason?.Code !== 'ConditionalCheckFailed') return [];
    return [{ delta, item: reason.Item === undefined ? undefined : plainItem(reason.Item) }];
  });
  if (conditions.length > 0) throw conditionRefusal(conditions, error);
  // A limit (an item over 400 KB): the same on every retry, so structural, never transient.
  const refused = reasons.flatMap((reason, i) => (reason.Code === 'ValidationError' ? [i] : []));
  const detail = refused.map((i) => reasons[i]?.Message ?? 'ValidationError').join('; ');
  if (refused.length > 0 && refused.every((i) => i >= stateStart)) {
    throw new StateItemTooLargeError(
      txn.topic,
      txn.partition,
      refused.map((i) => txn.state[i - stateStart]!.key),
      refused.map((i) => labels[i]!),
      detail,
      { cause: error },
    );
  }
  if (refused.length > 0) {
    throw new ItemLimitExceededError(
      txn.topic,
      txn.partition,
      refused.map((i) => labels[i] ?? `item ${i}`),
      detail,
      { cause: error },
    );
  }
}

/**
 * A refusal DynamoDB (Local) answers for the whole request, naming no item: an ADD of the wrong type, or a limit
 * (a Put over the size limit). Every state key of the transaction is then a candidate.
 */
export function explainStateRefusal(
  txn: StateRefusalContext,
  labels: readonly string[],
  error: unknown,
): void {
  const { name, message } = error as { name?: string; message?: string };
  if (name === 'ValidationException' && WRONG_TYPE.test(message ?? '')) {
    throw new StateTypeConflictError(
      txn.state.map((delta) => delta.key),
      String(message),
      { cause: error },
    );
  }
  if (!isLimitExceeded(error)) return;
  // The state items first, then the first item (the fence of a staging transaction).
  const candidates = labels.filter((label) => label.startsWith('state ')).concat(labels.slice(0, 1));
  if (txn.state.length > 0) {
    throw new StateItemTooLargeError(
      txn.topic,
      txn.partition,
      txn.state.map((delta) => delta.key),
      candidates,
      String(message),
      { cause: error },
    );
  }
  throw new ItemLimitExceededError(txn.topic, txn.partition, candidates, String(message), {
    cause: error,
  });
}

/**
 * AT_LEAST_ONCE / NONE: one chunk's keyed-state deltas (folded per key, planned within DynamoDB's limits as a
 * staging chunk is) in one transaction, without fence. A retried batch adds its deltas again: the duplication
 * those guarantees accept (min, max and latest stay exact: applying a value twice is applying it once). A refused
 * item throws as in the staging transaction: {@link StateTypeConflictError}, {@link StateConditionError} or
 * {@link StateItemTooLargeError}, which the processor resolves record by record.
 */
export async function applyState(at: TableRef, txn: DirectStateTransaction): Promise<void> {
  if (txn.state.length === 0) return;
  if (txn.state.length > MAX_TRANSACTION_ITEMS) throw tooManyItems(txn, txn.state.length);
  const items = txn.state.map((delta) => stateItem(at.table, txn.pipeline, delta));
  const labels = txn.state.map((delta) => `state ${delta.key}`);
  await send(at.doc, new TransactWriteCommand({ TransactItems: items }), 'dynamodb:TransactWriteItems', {
    missingTable: at.table,
    explain: (error) => {
      const reasons = cancellationReasons(error);
      if (reasons) explainStateCancellation(txn, reasons, labels, error);
      explainStateRefusal(txn, labels, error);
    },
  });
  believeCommitted(txn.state);
}

/**
 * A keyed-state item as stored (strongly consistent), or undefined: read only after a refusal, to find which
 * records meet a field they cannot update. Its min, max and latest fields are learnt (`state-knowledge.ts`).
 */
export async function readState(
  at: TableRef,
  pipeline: string,
  stateKey: string,
): Promise<Record<string, unknown> | undefined> {
  const { Item } = await send(
    at.doc,
    new GetCommand({ TableName: at.table, Key: keys.state(pipeline, stateKey), ConsistentRead: true }),
    'dynamodb:GetItem',
    { missingTable: at.table },
  );
  learn(at.table, pipeline, stateKey, Item);
  return Item;
}
