/**
 * One chunk's effects in ONE DynamoDB transaction (P1, P2): the write, and what it tells of the fence it left.
 * The parts:
 *   staging-effects.ts   what the transaction is asked to write, and what follows from that alone
 *   staging-items.ts     its items and their order, each with its condition
 *   staging-refusals.ts  what a cancelled transaction refuses, told from its cancellation reasons
 *   key-window-reads.ts  the read of the key-window buckets the transaction writes
 *
 * A chunk whose only item is the fence (inline entries, no claims, state or key window) is written with a plain
 * conditional UpdateItem: the same condition on one item, billed as one write, not as a transaction.
 *
 * A transaction DynamoDB refuses for a limit is structural, not transient: `ItemLimitExceededError` names the
 * partition and the refused item; for keyed-state items it is a `StateItemTooLargeError`.
 */
import { ConditionalCheckFailedException } from '@aws-sdk/client-dynamodb';
import { TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { cancellationReasons } from '../aws/classify.ts';
import {
  MAX_TRANSACTION_ITEMS,
  send,
  sendConditional,
  type TableRef,
  type TransactItem,
} from '../aws/dynamo.ts';
import { inlineBytesIn, type KeyTemplates, templatesIn } from './inline-entries.ts';
import { inlineBytesLeft } from './inline-writes.ts';
import type { StagingTransaction } from './staging-effects.ts';
import { plan } from './staging-items.ts';
import { explainCancellation, FenceMovedError } from './staging-refusals.ts';
import { believeCommitted, explainStateRefusal, tooManyItems } from './state-items.ts';

export { readKeyWindow } from './key-window-reads.ts';
export {
  createsFence,
  entriesInline,
  entryItemsMarkAfter,
  flushedEntries,
  type StagingTransaction,
} from './staging-effects.ts';
export { ClaimHandoverLostError, FenceMovedError, KeyWindowChangedError } from './staging-refusals.ts';

/** What a staging write tells of the fence item it left, when it knows (a write of the fence alone). */
export interface StagedFence {
  /** Bytes of the inline entries the fence item holds now (`inline-entries.ts`). */
  readonly inlineBytes?: number;
  /** The fence item's key templates now (`inline-entries.ts`). */
  readonly templates?: KeyTemplates;
}

/**
 * Applies a chunk's effects atomically, or throws `FenceMovedError` / `ClaimsTakenError` /
 * `ClaimHandoverLostError` / `KeyWindowChangedError` / `StateTypeConflictError` / `ItemLimitExceededError`.
 */
export async function stage(at: TableRef, txn: StagingTransaction): Promise<StagedFence> {
  const planned = plan(at.table, txn);
  const { items } = planned;
  // The planner keeps a chunk within the limit (the legacy fence item included): a defect, named, not retried.
  if (items.length > MAX_TRANSACTION_ITEMS) throw tooManyItems(txn, items.length);
  if (items.length === 1) return stageFenceAlone(at, txn, items[0]!);
  await send(at.doc, new TransactWriteCommand({ TransactItems: items }), 'dynamodb:TransactWriteItems', {
    missingTable: at.table,
    explain: (error) => {
      const reasons = cancellationReasons(error);
      if (reasons) explainCancellation(txn, reasons, planned, error);
      explainStateRefusal(txn, planned.labels, error);
    },
  });
  believeCommitted(txn.state);
  // The inline bytes a transaction that moved entries out of the fence left it (those it could not move).
  const { moved } = planned;
  return moved.length === 0 ? {} : { inlineBytes: inlineBytesLeft(txn.flush ?? {}, moved) };
}

/** A chunk whose only item is the fence: one conditional UpdateItem (see the module comment). */
async function stageFenceAlone(
  at: TableRef,
  txn: StagingTransaction,
  item: TransactItem,
): Promise<StagedFence> {
  const update = item.Update;
  if (update === undefined) throw new Error('the fence item of a staging transaction is an update');
  // The item as written comes back at no charge: the processor learns the inline bytes cleanup left it.
  const written = await sendConditional(
    at.doc,
    new UpdateCommand({ ...update, ReturnValues: 'ALL_NEW' }),
    'dynamodb:UpdateItem(fence)',
    { missingTable: at.table, lost: (error) => error instanceof ConditionalCheckFailedException },
  );
  if (written === undefined) throw new FenceMovedError(txn.topic, txn.partition, txn.expectedOffset);
  const fence = written.Attributes ?? {};
  return { inlineBytes: inlineBytesIn(fence), templates: templatesIn(fence) };
}
