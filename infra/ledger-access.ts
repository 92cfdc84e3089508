/**
 * Which ledger items each role of a pipeline may touch (`dynamodb:LeadingKeys`) and with which actions: the
 * processor's, the monitor's, and the replay plans' readers and writers.
 */
import { fenceLeadingKeys } from '../shared/ledger/fences.ts';
import { keys } from '../shared/ledger/layout.ts';

/**
 * DynamoDB actions the processor makes (checked against its calls in `test/infra/iam.test.ts`): the fence read,
 * claims ahead confirmed by UpdateItem, and the staging transaction's Put and Update items. No Query, Scan or
 * Delete, and no PartiQL statement but the claims' INSERTs ({@link PROCESSOR_CLAIM_INSERT_ACTIONS}).
 */
export const PROCESSOR_DYNAMODB_ACTIONS = ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem'];

/**
 * Claims ahead are created in batches of PartiQL INSERTs, which BatchExecuteStatement authorises as
 * `dynamodb:PartiQLInsert` per statement. Granted on the claims' keys alone ({@link claimLeadingKeys}), and only
 * when the request names its key (`Null` on `dynamodb:LeadingKeys` is false): DynamoDB's documentation shows the
 * leading-keys condition with the item APIs, not with PartiQL, and `ForAllValues` over a key the request does not
 * carry would match, which would allow an INSERT of any item of the table. If the key is not given, the INSERT is
 * refused and the processor claims per key by UpdateItem instead (saying so once per container), rather than
 * insert anywhere.
 */
export const PROCESSOR_CLAIM_INSERT_ACTIONS = ['dynamodb:PartiQLInsert'];

/** The partition keys of the idempotency claims (`shared/ledger/layout.ts`). */
export function claimLeadingKeys(pipeline: string): string[] {
  return [`${pipeline}#CLAIM#*`];
}
/**
 * The processor reads the checkpoint head (GetItem only) to learn whether the coordinator reads staged entries kept
 * inline in fence items (`shared/processor/inline-gate.ts`).
 */
export const PROCESSOR_HEAD_READ_ACTIONS = ['dynamodb:GetItem'];

/** Partition-scoped idempotency reads a partition's key window with one Query, on those keys only. */
export const PROCESSOR_KEY_WINDOW_ACTIONS = ['dynamodb:Query'];

/** The partition keys of the key-window buckets (`shared/ledger/key-window.ts`). */
export function keyWindowLeadingKeys(pipeline: string): string[] {
  return [`${pipeline}#KEYS#*`];
}

/**
 * The partition keys the processor may touch: its fences, staged-file entries, claims and keyed state — never
 * the checkpoint head, checkpoint records or cut pages (`<pl>#CHECKPOINT…`), which only the coordinator writes
 * (the processor only reads the head: {@link PROCESSOR_HEAD_READ_ACTIONS}).
 */
export function processorLeadingKeys(pipeline: string): string[] {
  return [
    ...fenceLeadingKeys(pipeline),
    `${pipeline}#STAGED#*`,
    ...claimLeadingKeys(pipeline),
    ...keyWindowLeadingKeys(pipeline),
    `${keys.statePrefix(pipeline)}*`,
  ];
}

/**
 * The partition keys the monitor reads (`readLedgerStatus`): the checkpoint head and records, the last commit's cut
 * pages (committed offsets), every fence, and the staged-file entries.
 */
export function monitorLeadingKeys(pipeline: string): string[] {
  return [
    keys.checkpointPk(pipeline),
    keys.cutPagesPk(pipeline, '*'),
    ...fenceLeadingKeys(pipeline),
    `${pipeline}#STAGED#*`,
  ];
}

/** The replay plans the replay processor reads (never writes: a processor must not be able to forge a switch). */
export const REPLAY_PROCESSOR_PLAN_ACTIONS = ['dynamodb:GetItem'];
/** What `operatorRoles` do to replay plans (`eos replay` writes a plan and requests the switch on it). */
export const OPERATOR_REPLAY_PLAN_ACTIONS = [
  'dynamodb:PutItem',
  'dynamodb:UpdateItem',
  'dynamodb:GetItem',
  'dynamodb:Query',
];
