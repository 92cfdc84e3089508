/**
 * Exactly-once dead-letter redrive: `eos redrive` sends committed dead letters back through the exactly-once path
 * with the current transform, keyed by their original (topic, partition, offset).
 *
 * A dead letter of lane L (a topic's epoch lane, `ledger/epochs.ts`) is staged again in the redrive lane `L~r<R>`
 * of its partition (R the round), at its original offset, by the processor's protocol unchanged (P2, P5); the
 * coordinator commits the lane as one more partition. What rounds guarantee is stated in docs/architecture.md
 * ("Lanes: epochs, generations and redrives" and the end-to-end property, item 5). Here, per (lane, partition):
 * - a run finds its round open (after a crash, an interrupted run) and goes on with it: the fence drops what the
 *   round staged already; at the end of a run the round's fence is closed (`closedAt`, as an epoch's);
 * - a new round starts only when the last committed cut covers the previous round's fence (else the run reports
 *   `waiting`: run again after the next checkpoint);
 * - a round redrives every record whose latest outcome is a dead letter and that no round turned into output,
 *   except one whose fate under the current transform is its latest dead letter's (`judge.ts`): nothing is
 *   written for it, so a run without a fix changes nothing. Every partition is judged before any record is sent.
 *   With `checkpoint`, only the records whose latest dead letter that checkpoint committed.
 *
 * Runs from the operator's machine (`eos redrive`) or a test, with the processor's code and settings: it needs
 * what the processor may do (stage under `_inprogress/`, write processor ledger keys) and to read manifests.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { AwsClients } from '../aws/clients.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import type { Settings } from '../config/settings.ts';
import { SchemaRegistryUnavailableError } from '../decode/errors.ts';
import type { DecodedRecord } from '../kafka/record.ts';
import { CLOSED_ATTRIBUTE, redriveLaneOf } from '../ledger/epochs.ts';
import { fenceKeys } from '../ledger/fences.ts';
import { KeyWindow, maxBuckets } from '../ledger/key-window.ts';
import { EpochChangedError, StagingLedger } from '../ledger/staging-ledger.ts';
import { createProcessor, type ProcessorHooks } from '../processor/processor.ts';
import type { Transform } from '../transforms/types.ts';
import {
  lookupFailure,
  RedriveError,
  RedriveRegistryUnavailableError,
  RedriveRoundClosedError,
} from './errors.ts';
import { Judge } from './judge.ts';
import { type PartitionState, readPartitionStates } from './partition-state.ts';
import type { PartitionRedrive, RedriveResult } from './redrive-result.ts';
import { planRound, type RoundPlan } from './round-plan.ts';

export { recordOf } from './dead-letter.ts';
export { RedriveError, RedriveRegistryUnavailableError, RedriveRoundClosedError } from './errors.ts';
export type { PartitionRedrive, RedriveResult } from './redrive-result.ts';

/** The steps of a redrive where a fault schedule can crash it (besides the processor's own steps). */
export const REDRIVE_STEPS = ['after-read', 'after-batch', 'before-close'] as const;
export type RedriveStep = (typeof REDRIVE_STEPS)[number];

export interface RedriveHooks {
  onStep?(step: RedriveStep, at: { readonly lane: string; readonly partition: number }): void | Promise<void>;
  /** The processor's hooks (crash a staging step). */
  readonly processor?: ProcessorHooks;
}

export interface RedriveOptions {
  readonly settings: Settings;
  readonly clients: AwsClients;
  /** The current transform (the fixed one). */
  readonly transform: Transform;
  /** Only the records whose latest dead letter this checkpoint committed; default every dead letter. */
  readonly checkpoint?: number;
  /** Records per staging call; default 500. */
  readonly batchSize?: number;
  readonly clock?: Clock;
  readonly hooks?: RedriveHooks;
}

/** A round plan judged: the records to send, those to dead-letter with a conflict's reason, the unchanged count. */
interface JudgedPlan {
  readonly plan: RoundPlan;
  readonly send: readonly DecodedRecord[];
  /** By original offset: the reason the round dead-letters the record with (see `judge.ts`). */
  readonly conflicts: ReadonlyMap<number, string>;
  readonly unchanged: number;
}

export class Redriver {
  private readonly clock: Clock;

  constructor(private readonly options: RedriveOptions) {
    this.clock = options.clock ?? systemClock;
    if (options.settings.deliveryGuarantee !== 'exactly-once') {
      throw new RedriveError('a redrive needs the exactly-once guarantee');
    }
  }

  async run(): Promise<RedriveResult> {
    const { manifests, states } = await readPartitionStates(this.options.settings, this.options.clients);
    const lastCut = manifests[manifests.length - 1]?.cut ?? {};
    const plans = states.map((state) => planRound(state, lastCut, this.options.checkpoint));
    const records = plans.flatMap((plan) => ('done' in plan ? [] : plan.candidates.map((c) => c.record)));
    await this.prepare(records, 'nothing was redriven');
    // Every partition is judged before any is sent: a judgement that stops the run (a registry refusing the
    // redriver) then leaves everything as it was.
    const judged: (JudgedPlan | PartitionRedrive)[] = [];
    for (const plan of plans) judged.push('done' in plan ? plan.done : await this.judge(plan));
    const results: PartitionRedrive[] = [];
    for (const item of judged) results.push('plan' in item ? await this.redrivePartition(item) : item);
    return { partitions: results };
  }

  /**
   * What the records to judge need (the transform's `prepare`: registry schemas), as the processor prepares a
   * batch before it evaluates any record: without it a registry-decoded record is judged undecodable ("not looked
   * up"), a reason no dead letter has, and every dead letter would be sent again. One record at a time, so that a
   * decoder's per-batch lookup limit never leaves a record unlooked-up (a reason of the batch, not of the record).
   * The transform only throws when the registry cannot answer: the run stops then, rather than judge by a lookup
   * that failed. Done for every partition's candidates before any is sent, and again just before each is judged
   * (cached by then; a forgotten "not found" is asked again).
   */
  private async prepare(records: readonly DecodedRecord[], consequence: string): Promise<void> {
    const { transform } = this.options;
    if (transform.prepare === undefined) return;
    for (const record of records) {
      try {
        await transform.prepare([record]);
      } catch (error) {
        throw new RedriveRegistryUnavailableError(
          `${lookupFailure(error)}: ${consequence}; run eos redrive again once it answers`,
          { cause: error },
        );
      }
    }
  }

  private async redrivePartition(judged: JudgedPlan): Promise<PartitionRedrive> {
    const { plan, send, conflicts, unchanged } = judged;
    const { state, base, round, resumedAt } = plan;
    const { lane, partition } = state;
    await this.options.hooks?.onStep?.('after-read', { lane, partition });
    const resumed = state.rounds.some((r) => r.round === round);
    if (send.length === 0 && !resumed) return { ...base, unchanged, outcome: 'nothing' };
    const roundLane = redriveLaneOf(lane, round);
    const staged = { output: 0, deadLettered: 0 };
    const processor = createProcessor({
      settings: this.options.settings,
      clients: this.options.clients,
      transform: withConflicts(this.options.transform, conflicts),
      clock: this.clock,
      ...(this.options.hooks?.processor ? { hooks: this.options.hooks.processor } : {}),
    });
    const size = this.options.batchSize ?? 500;
    let stagedOffset = resumedAt;
    for (let from = 0; from < send.length; from += size) {
      const records = send.slice(from, from + size);
      const report = await processor
        .stageInLane({ topic: roundLane, partition, records })
        .catch((error: unknown) => {
          if (error instanceof EpochChangedError) {
            throw new RedriveRoundClosedError(
              `round ${round} of ${lane}-${partition} was closed by another eos redrive run meanwhile; nothing is ` +
                'duplicated: run eos redrive again after the next checkpoint',
              { cause: error },
            );
          }
          if (!(error instanceof SchemaRegistryUnavailableError)) throw error;
          throw new RedriveRegistryUnavailableError(
            `${lookupFailure(error)}: round ${round} of ${lane}-${partition} stays open; run eos redrive again ` +
              'once it answers, and it goes on with the round',
            { cause: error },
          );
        });
      staged.output += report.stagedRows;
      staged.deadLettered += report.deadLettered;
      stagedOffset = Math.max(stagedOffset, report.stagedOffset);
      await this.options.hooks?.onStep?.('after-batch', { lane, partition });
    }
    await this.options.hooks?.onStep?.('before-close', { lane, partition });
    if (stagedOffset >= 0) await this.closeRound(roundLane, partition);
    return { ...base, round, outcome: 'redriven', sent: send.length, staged, unchanged };
  }

  /**
   * Which candidates to send, as the records to stage: those whose fate under the current transform differs from
   * their latest dead letter's (`judge.ts`; the processor judges again when it stages). A registry that refuses the
   * redriver's lookups stops the run: its refusal is not the record's fate.
   */
  private async judge(plan: RoundPlan): Promise<JudgedPlan> {
    const { settings, clients, transform } = this.options;
    const { state } = plan;
    const judge = new Judge({
      settings,
      clients,
      transform,
      clock: this.clock,
      lane: state.lane,
      partition: state.partition,
      windows: settings.idempotencyScope === 'partition' ? await this.windowsOf(state) : [],
    });
    const send: DecodedRecord[] = [];
    const conflicts = new Map<number, string>();
    let unchanged = 0;
    for (const { letter, record } of plan.candidates) {
      await this.prepare([record], 'nothing was redriven');
      const verdict = await judge.verdict(letter.error, record);
      if (verdict.kind === 'refused') {
        throw new RedriveRegistryUnavailableError(
          `the transform's schema registry refused the lookup for ${state.lane}-${state.partition}@` +
            `${letter.offset} (${verdict.reason}): nothing was redriven; run eos redrive again with credentials ` +
            'the registry accepts (those of the processor)',
        );
      }
      if (verdict.kind === 'unchanged') {
        unchanged++;
        continue;
      }
      if (verdict.kind === 'conflict') conflicts.set(record.offset, verdict.reason);
      send.push(record);
    }
    return { plan, send, conflicts, unchanged };
  }

  /** Partition scope: the key windows of the dead letters' lane and of its earlier redrive rounds. */
  private async windowsOf(state: PartitionState): Promise<KeyWindow[]> {
    const { settings, clients } = this.options;
    const ledger = new StagingLedger(clients.dynamodb, settings.ledgerTable);
    const limits = { ttlSeconds: settings.idempotencyTtlSeconds, windowKeys: settings.idempotencyWindowKeys };
    const lanes = [state.lane, ...state.rounds.map((round) => redriveLaneOf(state.lane, round.round))];
    return Promise.all(
      lanes.map(
        async (lane) =>
          new KeyWindow(
            await ledger.readKeyWindow(settings.pipelineId, lane, state.partition, maxBuckets(limits)),
            limits,
          ),
      ),
    );
  }

  /** Closes a round's fence: nothing stages on it any more (a slower concurrent run fails its condition). */
  private async closeRound(lane: string, partition: number): Promise<void> {
    const { settings, clients } = this.options;
    try {
      await ledgerDocumentClient(clients.dynamodb).send(
        new UpdateCommand({
          TableName: settings.ledgerTable,
          Key: fenceKeys.fence(settings.pipelineId, lane, partition),
          UpdateExpression: 'SET #closed = :now',
          ConditionExpression: 'attribute_exists(stagedOffset) AND attribute_not_exists(#closed)',
          ExpressionAttributeNames: { '#closed': CLOSED_ATTRIBUTE },
          ExpressionAttributeValues: { ':now': this.clock.now() },
        }),
      );
    } catch (error) {
      // Closed already (a concurrent run closed it first): the round is over either way.
      if ((error as { name?: string }).name !== 'ConditionalCheckFailedException') throw error;
    }
  }
}

/**
 * The transform the round stages with: the current one, but a record the judgement found in conflict with a key a
 * window of its lane holds (`judge.ts`) is rejected with that conflict's reason, so the processor dead-letters it
 * in the round lane through the exactly-once path, as it would have had it seen that window.
 */
function withConflicts(transform: Transform, conflicts: ReadonlyMap<number, string>): Transform {
  if (conflicts.size === 0) return transform;
  return {
    name: transform.name,
    ...(transform.valueFormat === undefined ? {} : { valueFormat: transform.valueFormat }),
    ...(transform.prepare === undefined ? {} : { prepare: (records) => transform.prepare!(records) }),
    apply(record) {
      const reason = conflicts.get(record.offset);
      return reason === undefined ? transform.apply(record) : { kind: 'poison', error: reason };
    },
  };
}

export async function redrive(options: RedriveOptions): Promise<RedriveResult> {
  return new Redriver(options).run();
}
