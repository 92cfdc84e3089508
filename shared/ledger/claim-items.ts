/**
 * Idempotency claims (P4): one item per idempotency key and output generation, naming the record that holds the
 * key (`claimant`, `digest`). The processor writes them ahead of its staging transaction ({@link claimAhead}:
 * created in batches where absent, `claim-batch.ts`; else one conditional update per key), puts or takes them over
 * inside it ({@link claimPut}), and releases the ones a batch that failed for good wrote ({@link releaseClaims}).
 *
 * Claims written ahead list the attempts that created or confirmed them (`holders`); a claim a staging transaction
 * puts lists the committing attempt, which never leaves. A claim left without holders is marked released (expired),
 * never deleted: the processor needs no DeleteItem or ConditionCheckItem, and never releases a claim another attempt
 * of the same batch relies on.
 */
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { send, sendConditional, type TableRef } from '../aws/dynamo.ts';
import { mapLimit } from '../concurrency.ts';
import { PipelineError } from '../errors.ts';
import { insertClaims, type OnHeld } from './claim-batch.ts';
import { generationOfLane } from './epochs.ts';
import { keys } from './layout.ts';
import { type ClaimItem, parseClaimant } from './records.ts';

/** Who holds a claim another record found taken (the digest is absent on claims written before digests). */
export interface ClaimHolder {
  readonly idempotencyKey: string;
  readonly claimant: string;
  readonly digest: string | undefined;
  /** A key window's holder: `digest` is only the digest's prefix (`key-window.ts` digestPrefix). */
  readonly prefixOnly?: true;
}

/** Some idempotency keys of the chunk are claimed by other records (P4); `holders` says by whom. */
export class ClaimsTakenError extends PipelineError {
  constructor(readonly holders: readonly ClaimHolder[]) {
    super(`idempotency keys already claimed: ${holders.map((h) => h.idempotencyKey).join(', ')}`);
  }
}

/** What writing claims ahead found: keys another record holds, and keys whose holder's claim has expired. */
export interface ClaimsAhead {
  readonly taken: ClaimHolder[];
  /** To be taken over inside the staging transaction (conditioned on still being expired). */
  readonly expired: string[];
  /** The claims this call created or confirmed as its records' own (released if the batch fails for good). */
  readonly held: ClaimItem[];
}

/** `expiresAt` of a released claim: expired for every reader, so the next record with its key takes it over. */
export const RELEASED = 0;

/**
 * A claim is this record's own when it names the same claimant and the same digest: a retry of the record. The
 * same claimant with another digest is another record at the same offset (a new topic generation, a new epoch).
 * Claims written before digests existed match on the claimant alone.
 */
const OWN_CLAIM = '(claimant = :claimant AND (digest = :digest OR attribute_not_exists(digest)))';

/** Claims written ahead at once per partition batch: enough to hide latency, few enough not to throttle. */
const CLAIM_CONCURRENCY = 32;

const isConditionFailed = (error: unknown): boolean =>
  (error as { name?: string }).name === 'ConditionalCheckFailedException';

/** The output generation whose claims a claimant (`<lane>#<partition>#<offset>`) takes: its lane's (`layout.ts`). */
export function claimGeneration(claimant: string): number {
  const of = parseClaimant(claimant);
  return of === undefined ? 0 : generationOfLane(of.lane);
}

/** An attribute of an item returned with a failed condition, plain (document client) or DynamoDB-typed. */
function attributeOf(item: unknown, name: string): string | number | undefined {
  const value = (item as Record<string, unknown> | undefined)?.[name];
  if (typeof value === 'number' || typeof value === 'string') return value;
  const typed = value as { N?: string; S?: string } | undefined;
  if (typed?.N !== undefined) return Number(typed.N);
  return typed?.S;
}

/** The holder of `idempotencyKey` as a failed condition returned its item. */
export function holderOf(idempotencyKey: string, item: unknown): ClaimHolder {
  const claimant = attributeOf(item, 'claimant');
  const digest = attributeOf(item, 'digest');
  return {
    idempotencyKey,
    claimant: typeof claimant === 'string' ? claimant : '(unknown)',
    digest: typeof digest === 'string' ? digest : undefined,
  };
}

/** A claim as it names its record: what a handover's condition checks. */
export interface ClaimOwner {
  readonly idempotencyKey: string;
  readonly claimant: string;
  readonly digest: string;
}

/**
 * The Put of a claim inside a staging transaction: absent, expired, or already this record's; or, with
 * `predecessor`, still naming the record this same transaction dead-letters for its state (the handover of its key
 * to the batch's next record with it, atomic with the fence that decides the predecessor's fate).
 */
export function claimPut(
  table: string,
  pipeline: string,
  claim: ClaimItem,
  now: number,
  attemptId: string,
  predecessor?: ClaimOwner,
) {
  const handover =
    predecessor === undefined ? '' : ' OR (claimant = :predecessor AND digest = :predecessorDigest)';
  return {
    TableName: table,
    // The committing attempt stays a holder for good: a Put replaces the item, so the holders an earlier
    // attempt left (which may still release) are gone, and a claim without holders could be marked released.
    // With this holder, the release's "mark released" step (conditioned on no holders) never frees a claim a
    // transaction committed.
    Item: {
      ...keys.claim(pipeline, claim.idempotencyKey, claimGeneration(claim.claimant)),
      ...claim,
      holders: new Set([attemptId]),
    },
    // Absent, expired (TTL deletion lags by up to days), or already ours (a retry of the same record).
    ConditionExpression: `attribute_not_exists(pk) OR expiresAt < :nowSeconds OR ${OWN_CLAIM}${handover}`,
    ExpressionAttributeValues: {
      ':nowSeconds': Math.floor(now / 1000),
      ':claimant': claim.claimant,
      ':digest': claim.digest,
      ...(predecessor === undefined
        ? {}
        : { ':predecessor': predecessor.claimant, ':predecessorDigest': predecessor.digest }),
    },
  };
}

/**
 * The release of a claim inside the staging transaction that dead-letters its record for its state: the record
 * never holds its key, and the release commits with the fence that decides so, whoever else (a crashed attempt of
 * the same batch) still lists itself as holder. On condition the claim still names exactly that record.
 */
export function claimRelease(table: string, pipeline: string, owner: ClaimOwner) {
  return {
    TableName: table,
    Key: keys.claim(pipeline, owner.idempotencyKey, claimGeneration(owner.claimant)),
    UpdateExpression: 'SET expiresAt = :released',
    ConditionExpression: 'claimant = :claimant AND digest = :digest',
    ExpressionAttributeValues: {
      ':released': RELEASED,
      ':claimant': owner.claimant,
      ':digest': owner.digest,
    },
  };
}

/**
 * Ahead of the transaction a claim may only be created or confirmed while live, never taken over: taking over an
 * expired claim happens inside the fenced transaction, so an invocation that turns out to apply nothing (a stale
 * fence) cannot steal a key from a record still waiting for its retry. That holds for the record's own claim too:
 * a claim released because its record was dead-lettered must not come back to life through a slow attempt of
 * the same batch that confirms it after the release.
 */
function claimAheadUpdate(table: string, pipeline: string, claim: ClaimItem, now: number, attemptId: string) {
  return new UpdateCommand({
    TableName: table,
    Key: keys.claim(pipeline, claim.idempotencyKey, claimGeneration(claim.claimant)),
    UpdateExpression:
      'SET idempotencyKey = :key, claimant = :claimant, digest = :digest, expiresAt = :expiresAt ' +
      'ADD holders :attempts',
    ConditionExpression: `attribute_not_exists(pk) OR (${OWN_CLAIM} AND expiresAt >= :nowSeconds)`,
    ExpressionAttributeValues: {
      ':nowSeconds': Math.floor(now / 1000),
      ':key': claim.idempotencyKey,
      ':claimant': claim.claimant,
      ':digest': claim.digest,
      ':expiresAt': claim.expiresAt,
      ':attempts': new Set([attemptId]),
    },
    ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
  });
}

/**
 * Writes claims ahead of the staging transaction: absent, or already naming this claimant with this digest (a
 * retry of the same record). Absent claims are created in batches ({@link insertClaims}: one INSERT per key, each
 * failing on its own when its item exists); every key a batch did not create goes through the per-key
 * create-or-confirm update ({@link claimAheadKeys}). Returns who holds the keys another record holds (the
 * processor compares digests: duplicate or conflict) and the claims it holds now. A claim written here whose
 * record never commits stays until the record's retry re-claims it as its own and commits it, or until the batch
 * fails deterministically and releases it ({@link releaseClaims}). Each claim created or confirmed lists
 * `attemptId` among its holders: a release removes only its own attempt. `onHeld` is told of each claim as soon as
 * it is created or confirmed, so that when this call fails partway the caller still releases what it wrote.
 */
export async function claimAhead(
  at: TableRef,
  pipeline: string,
  claims: readonly ClaimItem[],
  now: number,
  attemptId: string,
  onHeld: OnHeld = () => {},
): Promise<ClaimsAhead> {
  const inserts = claims.map((claim) => ({
    key: keys.claim(pipeline, claim.idempotencyKey, claimGeneration(claim.claimant)),
    claim,
  }));
  const { created, undecided, repeats } = await insertClaims(at, inserts, attemptId, onHeld);
  const result: ClaimsAhead = { taken: [], expired: [], held: created.map(({ claim }) => claim) };
  // A key listed twice is held by its first record: the repeats are decided once the first is.
  for (const left of [undecided, repeats]) {
    const decided = await claimAheadKeys(
      at,
      pipeline,
      left.map(({ claim }) => claim),
      now,
      attemptId,
      onHeld,
    );
    result.taken.push(...decided.taken);
    result.expired.push(...decided.expired);
    result.held.push(...decided.held);
  }
  return result;
}

/** Claims ahead one conditional update per key, in parallel: create, or confirm a live claim of the same record. */
async function claimAheadKeys(
  at: TableRef,
  pipeline: string,
  claims: readonly ClaimItem[],
  now: number,
  attemptId: string,
  onHeld: OnHeld,
): Promise<ClaimsAhead> {
  const result: ClaimsAhead = { taken: [], expired: [], held: [] };
  let next = 0;
  let failure: { error: unknown } | undefined;
  const worker = async (): Promise<void> => {
    // Stop at the first real error: no put of this invocation outlives its failure.
    while (next < claims.length && !failure) {
      const claim = claims[next++]!;
      try {
        await send(
          at.doc,
          claimAheadUpdate(at.table, pipeline, claim, now, attemptId),
          'dynamodb:UpdateItem',
          {
            missingTable: at.table,
          },
        );
        result.held.push(claim);
        onHeld(claim);
      } catch (error) {
        if (!isConditionFailed(error)) {
          failure ??= { error };
          continue;
        }
        const item = (error as { Item?: unknown }).Item;
        const expiresAt = attributeOf(item, 'expiresAt');
        if (typeof expiresAt === 'number' && expiresAt < Math.floor(now / 1000)) {
          result.expired.push(claim.idempotencyKey);
        } else {
          result.taken.push(holderOf(claim.idempotencyKey, item));
        }
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(CLAIM_CONCURRENCY, claims.length) }, worker));
  if (failure) throw failure.error;
  return result;
}

/**
 * Releases the claims an attempt wrote ahead (or confirmed) for a batch that then failed deterministically, so that
 * a duplicate of their keys elsewhere is not dropped because of a claim whose record never becomes durable.
 * Attempt-scoped, by UpdateItem only (the processor role has no DeleteItem):
 *   1. remove `attemptId` from the claim's `holders`, on condition the claim still names exactly its record
 *      (claimant and digest) and lists this attempt;
 *   2. if that left no holder, mark the claim released (`expiresAt` := 0, so the next record with the key takes
 *      it over inside its fenced transaction, as any expired claim), on condition it still has no holder.
 * A claim another live attempt confirmed (the mapping's retry of the same batch, which may commit it without
 * putting it in its transaction) lists that attempt too, so it is never released by this one; a claim put by a
 * staging transaction (a takeover, or `in-transaction` mode) lists the committing attempt as holder, which
 * never releases what it committed (its records are at or below the fence), so it is never released.
 * A claim left by a crashed attempt keeps that attempt as holder: its retry confirms it as its own (same claimant
 * and digest), and others see its claimant and digest until its TTL. Returns how many claims were released.
 */
export async function releaseClaims(
  at: TableRef,
  pipeline: string,
  attemptId: string,
  claims: readonly ClaimItem[],
): Promise<number> {
  const options = { missingTable: at.table, lost: isConditionFailed };
  let released = 0;
  for (const claim of claims) {
    const key = keys.claim(pipeline, claim.idempotencyKey, claimGeneration(claim.claimant));
    const ours = { ':claimant': claim.claimant, ':digest': claim.digest };
    const left = await sendConditional(
      at.doc,
      new UpdateCommand({
        TableName: at.table,
        Key: key,
        UpdateExpression: 'DELETE holders :attempts',
        ConditionExpression: 'claimant = :claimant AND digest = :digest AND contains(holders, :attempt)',
        ExpressionAttributeValues: { ...ours, ':attempts': new Set([attemptId]), ':attempt': attemptId },
        ReturnValues: 'ALL_NEW',
      }),
      'dynamodb:UpdateItem',
      options,
    );
    if (left === undefined) continue; // not ours now
    if (left.Attributes?.holders !== undefined) continue; // another attempt holds it: its claim now
    const marked = await sendConditional(
      at.doc,
      new UpdateCommand({
        TableName: at.table,
        Key: key,
        UpdateExpression: 'SET expiresAt = :released',
        ConditionExpression: 'claimant = :claimant AND digest = :digest AND attribute_not_exists(holders)',
        ExpressionAttributeValues: { ...ours, ':released': RELEASED },
      }),
      'dynamodb:UpdateItem',
      options,
    );
    if (marked !== undefined) released += 1; // else confirmed meanwhile
  }
  return released;
}

/**
 * Marks a claim released (expired for every reader) on condition it still names exactly `claimant` and `digest`:
 * for a claim whose record can never be staged (its lane was closed by a new epoch below it, see the processor's
 * `releaseOrphans`). Returns whether it was released (false: it changed meanwhile).
 */
export async function releaseOrphanClaim(
  at: TableRef,
  pipeline: string,
  idempotencyKey: string,
  claimant: string,
  digest: string,
): Promise<boolean> {
  const output = await sendConditional(
    at.doc,
    new UpdateCommand({
      TableName: at.table,
      Key: keys.claim(pipeline, idempotencyKey, claimGeneration(claimant)),
      UpdateExpression: 'SET expiresAt = :released',
      ConditionExpression: 'claimant = :claimant AND digest = :digest',
      ExpressionAttributeValues: { ':released': RELEASED, ':claimant': claimant, ':digest': digest },
    }),
    'dynamodb:UpdateItem(claim)',
    { missingTable: at.table, lost: isConditionFailed },
  );
  return output !== undefined;
}

/**
 * The live output's (generation 0) claims of `idempotencyKeys` that are not released, by key: what a replay
 * generation judges its records' keys against too (`Processor.liveHolders`). An expired claim counts: it is what
 * the live pipeline judged the range's records by when it ran; DynamoDB's TTL deletion removes it some time later,
 * and with it this memory (a documented limit). GetItem per key (the processor role has no BatchGetItem), eight in
 * flight.
 */
export async function readLiveClaims(
  at: TableRef,
  pipeline: string,
  idempotencyKeys: readonly string[],
): Promise<ClaimHolder[]> {
  const items = await mapLimit(idempotencyKeys, 8, async (key) => {
    const { Item } = await send(
      at.doc,
      new GetCommand({ TableName: at.table, Key: keys.claim(pipeline, key, 0), ConsistentRead: true }),
      'dynamodb:GetItem(claim)',
      { missingTable: at.table },
    );
    return Item;
  });
  return items.flatMap((item) =>
    item === undefined ||
    typeof item.claimant !== 'string' ||
    typeof item.idempotencyKey !== 'string' ||
    item.expiresAt === RELEASED
      ? []
      : [
          {
            idempotencyKey: item.idempotencyKey,
            claimant: item.claimant,
            digest: typeof item.digest === 'string' ? item.digest : undefined,
          },
        ],
  );
}
