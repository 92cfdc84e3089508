/**
 * Whether a committed dead letter's fate under the current transform differs from the one it has: the redriver's
 * judgement of one record, before anything is sent (`redrive.ts`). A pure evaluation of the prepared record, plus
 * the few ledger reads that decide whether a dead letter the ledger made would be made again:
 *
 * - the transform rejects it with the reason it has: left as it is;
 * - the transform rejects it because the schema registry refused the redriver (its credentials are not the
 *   processor's): not the record's fate, so the run stops, unless that refusal is the dead letter's own reason;
 * - a key conflict (global scope): left as it is only while a live claim of another payload holds the key the
 *   transform gives now (one read of that claim); a key held by nothing, or by this very payload, is sent. In a
 *   replay generation's lane the live output's claim counts too when its claimant lies outside the plan's ranges
 *   (expired or not, as the processor judges it);
 * - an add to a state field stored as text: left as it is while the result adds to a field its state item stores
 *   as text now (one read per state key it adds to);
 * - a state item grown past DynamoDB's item limit: left as it is while the result would still take the item as
 *   stored now past the limit (items never shrink); sent when the fix no longer grows it that far;
 * - partition scope: a key a window of the lane (or of an earlier round) holds with another payload is a conflict
 *   the round lane's own, empty, window cannot see: the record is dead-lettered there with the processor's reason
 *   (`conflict`), or left as it is when its dead letter is that conflict already. Held with the same payload it is
 *   a duplicate of a record that was output: left as it is, never output beside it.
 */
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import type { AwsClients } from '../aws/clients.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import type { Clock } from '../clock.ts';
import type { Settings } from '../config/settings.ts';
import type { DecodedRecord } from '../kafka/record.ts';
import { generationOfLane } from '../ledger/epochs.ts';
import { digestPrefix, type KeyWindow } from '../ledger/key-window.ts';
import { keys } from '../ledger/layout.ts';
import { RELEASED, StagingLedger } from '../ledger/staging-ledger.ts';
import { type EvaluatedRecord, evaluateRecord } from '../processor/evaluate.ts';
import { effectLimits } from '../processor/processor.ts';
import { nonNumberAddedTo } from '../processor/state-refusal.ts';
import { oversizedStateRecords } from '../processor/state-size.ts';
import { replaysClaimant } from '../replay/plan.ts';
import { ReplayStore } from '../replay/store.ts';
import type { Transform } from '../transforms/types.ts';

/** What to do with one dead letter. */
export type Verdict =
  | { readonly kind: 'send' }
  | { readonly kind: 'unchanged' }
  /** Send it, to be dead-lettered in the round with `reason` (a conflict only the redriver can see). */
  | { readonly kind: 'conflict'; readonly reason: string }
  /** The schema registry refused the lookup: stop the run (`reason` is the record's would-be reason). */
  | { readonly kind: 'refused'; readonly reason: string };

/** The processor's wording of a key conflict, an add to a text field and a state item over its limit (prefixes). */
const KEY_CONFLICT = /^idempotency key "/;
const STATE_FIELD = /^state field "/;
const STATE_SIZE = /^state item ".*" would grow past DynamoDB's 400 KB item limit/s;

/**
 * A registry's refusal as the decoders word it (`shared/decode/registry.ts`): a Confluent 4xx other than 404 (whose
 * detail is "the registry does not have it"), 408 and 429 (which are retried, never a reason); Glue's AccessDenied
 * or InvalidInput.
 */
const REGISTRY_REFUSAL =
  /: unknown schema (?:version )?id [^:]+: (?:registry answered 4\d\d|Glue answered (?:AccessDenied|InvalidInput)Exception)/;

/** Whether `reason` says the schema registry refused the lookup (the credentials, not the record). */
export function isRegistryRefusal(reason: string): boolean {
  return REGISTRY_REFUSAL.test(reason);
}

export interface JudgeOptions {
  readonly settings: Settings;
  readonly clients: AwsClients;
  readonly transform: Transform;
  readonly clock: Clock;
  /** The dead letters' lane and partition. */
  readonly lane: string;
  readonly partition: number;
  /** Partition scope: the key windows of the lane and its earlier rounds (empty in global scope). */
  readonly windows: readonly KeyWindow[];
}

/** A stored claim of a key, as the judgement needs it. */
interface StoredClaim {
  readonly digest: string | undefined;
  readonly live: boolean;
}

export class Judge {
  private readonly ledger: StagingLedger;

  constructor(private readonly options: JudgeOptions) {
    this.ledger = new StagingLedger(options.clients.dynamodb, options.settings.ledgerTable);
  }

  /** The verdict on `record`, whose latest dead letter says `reason` (the transform's `prepare` done). */
  async verdict(reason: string, record: DecodedRecord): Promise<Verdict> {
    const { settings, transform } = this.options;
    const evaluated = evaluateRecord(transform, settings.idempotencyKey, record, effectLimits(settings));
    // Cut as the dead letter's reason was (deadLetterOf), so the two compare as written.
    const rejection = evaluated.deadLetter?.error;
    if (rejection !== undefined) {
      if (rejection === reason) return { kind: 'unchanged' };
      return isRegistryRefusal(rejection) ? { kind: 'refused', reason: rejection } : { kind: 'send' };
    }
    const key = evaluated.idempotencyKey;
    if (key !== undefined && settings.idempotencyScope === 'partition') {
      const held = this.windowVerdict(reason, key, evaluated.digest);
      if (held !== undefined) return held;
    }
    if (KEY_CONFLICT.test(reason)) {
      if (key === undefined || settings.idempotencyScope === 'partition') return { kind: 'send' };
      const claim = await this.claimOf(key);
      const another = claim?.live === true && claim.digest !== undefined && claim.digest !== evaluated.digest;
      if (another || (await this.liveHolderDiffers(key, evaluated.digest))) return { kind: 'unchanged' };
      return { kind: 'send' };
    }
    if (STATE_FIELD.test(reason) && (await this.addsToTextFieldAgain(evaluated)))
      return { kind: 'unchanged' };
    if (STATE_SIZE.test(reason) && (await this.growsPastLimitAgain(evaluated))) return { kind: 'unchanged' };
    return { kind: 'send' };
  }

  /** Partition scope: what a window holding `key` makes of the record; `undefined` when none holds it. */
  private windowVerdict(reason: string, key: string, digest: string): Verdict | undefined {
    const { windows, clock, lane, partition } = this.options;
    const now = clock.now();
    const holder = windows.map((window) => window.lookup(key, now)).find((found) => found !== undefined);
    if (holder === undefined) return undefined;
    if (holder.digestPrefix === digestPrefix(digest) || KEY_CONFLICT.test(reason))
      return { kind: 'unchanged' };
    return {
      kind: 'conflict',
      // The processor's words for a window's holder (`Processor.stagePartition`).
      reason:
        `idempotency key ${JSON.stringify(key)} is already claimed by an earlier record of ${lane}-${partition} ` +
        '(key window) with a different payload',
    };
  }

  /** The claim of `key` in the lane's generation: live when neither released nor expired. */
  private async claimOf(key: string): Promise<StoredClaim | undefined> {
    const { settings, clients, clock, lane } = this.options;
    const { Item } = await ledgerDocumentClient(clients.dynamodb).send(
      new GetCommand({
        TableName: settings.ledgerTable,
        Key: keys.claim(settings.pipelineId, key, generationOfLane(lane)),
        ConsistentRead: true,
      }),
    );
    if (Item === undefined) return undefined;
    const expiresAt = Item.expiresAt;
    return {
      digest: typeof Item.digest === 'string' ? Item.digest : undefined,
      live:
        typeof expiresAt === 'number' &&
        expiresAt !== RELEASED &&
        expiresAt >= Math.floor(clock.now() / 1000),
    };
  }

  /**
   * A replay generation's lane: whether the live output's claim of `key` holds it with another payload, its claimant
   * outside the generation's ranges. The round's processor judges the record against that claim as against its own
   * generation's (`Processor.liveHolders`, which counts an expired claim too), so the conflict would be made again.
   */
  private async liveHolderDiffers(key: string, digest: string): Promise<boolean> {
    const { settings, clients, lane } = this.options;
    const generation = generationOfLane(lane);
    if (generation === 0) return false;
    const holders = await this.ledger.readLiveClaims(settings.pipelineId, [key]);
    if (holders.length === 0) return false;
    const plan = await new ReplayStore(clients.dynamodb, settings.ledgerTable, settings.pipelineId).read(
      generation,
    );
    return holders.some(
      (holder) =>
        holder.digest !== undefined &&
        holder.digest !== digest &&
        !(plan !== undefined && replaysClaimant(plan, holder.claimant)),
    );
  }

  /**
   * Whether the result adds to a field its state item stores as something other than a number now: the processor's
   * test for that refusal (`state-refusal.ts`), on the items as stored. Judged by the ledger, not by the reason's
   * words: a reason over 1,000 characters is kept cut, and may end inside the state key.
   */
  private async addsToTextFieldAgain(evaluated: EvaluatedRecord): Promise<boolean> {
    const adding = this.stateOf(evaluated).filter((delta) => Object.keys(delta.add).length > 0);
    for (const stateKey of new Set(adding.map((delta) => delta.key))) {
      const item = await this.ledger.readState(this.options.settings.pipelineId, stateKey);
      if (item === undefined) continue;
      const refused = adding.some(
        (delta) => delta.key === stateKey && nonNumberAddedTo(item, delta.add) !== undefined,
      );
      if (refused) return true;
    }
    return false;
  }

  /** Whether the result would take one of the state items it sets, as stored now, past the item limit. */
  private async growsPastLimitAgain(evaluated: EvaluatedRecord): Promise<boolean> {
    const state = this.stateOf(evaluated);
    if (state.length === 0) return false;
    const stored = new Map<string, Record<string, unknown> | undefined>();
    for (const stateKey of new Set(state.map((delta) => delta.key))) {
      stored.set(stateKey, await this.ledger.readState(this.options.settings.pipelineId, stateKey));
    }
    return oversizedStateRecords([{ ...evaluated, state }], stored).size > 0;
  }

  /** The keyed state the processor would apply: none in a replay generation's lanes (they rewrite output only). */
  private stateOf(evaluated: EvaluatedRecord): EvaluatedRecord['state'] {
    return generationOfLane(this.options.lane) === 0 ? evaluated.state : [];
  }
}
