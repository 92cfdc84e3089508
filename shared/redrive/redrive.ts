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
import { PipelineError } from '../errors.ts';
import { decodeRecord, type MskRecord, signedHeaderBytes } from '../kafka/event.ts';
import type { DecodedRecord } from '../kafka/record.ts';
import { CLOSED_ATTRIBUTE, parseLane, redriveLaneOf, sourceLaneOf } from '../ledger/epochs.ts';
import { fenceKeys } from '../ledger/fences.ts';
import { KeyWindow, maxBuckets } from '../ledger/key-window.ts';
import { partitionId } from '../ledger/layout.ts';
import { readFenceItems } from '../ledger/staged-entries.ts';
import { EpochChangedError, StagingLedger } from '../ledger/staging-ledger.ts';
import { createProcessor, type ProcessorHooks } from '../processor/processor.ts';
import { GenerationView } from '../sink/generations.ts';
import type { Manifest, ManifestFile } from '../sink/manifest.ts';
import { readCommittedFile, readManifests } from '../sink/reader.ts';
import type { Transform } from '../transforms/types.ts';
import { Judge } from './judge.ts';

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

/** What a run did for one (lane, partition) that has dead letters. */
export interface PartitionRedrive {
  /** The dead letters' lane (`<topic>` or `<topic>~<epoch>`). */
  readonly lane: string;
  readonly partition: number;
  /** The round run (absent when nothing was to do or the run waits). */
  readonly round?: number;
  /**
   * `redriven`: the round ran; `nothing`: every dead letter is redriven already or fails again for the same
   * reason; `waiting`: the previous round is not committed yet.
   */
  readonly outcome: 'redriven' | 'nothing' | 'waiting';
  /** Records sent through the processor in this run (those an earlier run of the round staged are dropped there). */
  readonly sent: number;
  /** Of those, output rows and dead letters the processor staged in this run. */
  readonly staged: { readonly output: number; readonly deadLettered: number };
  /** Records left as they are: their fate under the current transform is their latest dead letter's. */
  readonly unchanged: number;
  /** Dead-letter rows of the lane redrive could not read (not a record's dead letter): never sent, reported. */
  readonly unreadable: number;
}

export interface RedriveResult {
  readonly partitions: readonly PartitionRedrive[];
}

/** A dead-letter row as committed. */
interface DeadLetter {
  readonly offset: number;
  readonly topic: string;
  readonly error: string;
  readonly raw: {
    readonly key: string | null;
    readonly value: string | null;
    readonly headers: ReadonlyArray<{ readonly name: string; readonly value: string }>;
    readonly timestamp?: number;
  };
  /** The round whose lane holds it (0: the original lane). */
  readonly round: number;
  /** The checkpoint that committed it. */
  readonly checkpointId: number;
}

/** A round lane's fence, as read. */
interface RoundFence {
  readonly round: number;
  readonly stagedOffset: number;
  readonly closed: boolean;
}

/** What the committed output and the ledger say about one (lane, partition). */
interface PartitionState {
  readonly lane: string;
  readonly partition: number;
  /** By original offset: the latest dead letter (highest round). */
  readonly latest: Map<number, DeadLetter>;
  /** Original offsets a round turned into output. */
  readonly redriven: Set<number>;
  /** Dead-letter rows that are not a dead letter redrive can read (reported, never sent). */
  unreadable: number;
  rounds: RoundFence[];
}

/** A dead letter to judge, with the record it was made from. */
interface Candidate {
  readonly letter: DeadLetter;
  readonly record: DecodedRecord;
}

/** A (lane, partition) whose round runs: the round, where it resumes (-1: from the start), what it may send. */
interface RoundPlan {
  readonly state: PartitionState;
  readonly base: Omit<PartitionRedrive, 'outcome'>;
  readonly round: number;
  readonly resumedAt: number;
  readonly candidates: readonly Candidate[];
}

type PartitionPlan = RoundPlan | { readonly done: PartitionRedrive };

/** A round plan judged: the records to send, those to dead-letter with a conflict's reason, the unchanged count. */
interface JudgedPlan {
  readonly plan: RoundPlan;
  readonly send: readonly DecodedRecord[];
  /** By original offset: the reason the round dead-letters the record with (see `judge.ts`). */
  readonly conflicts: ReadonlyMap<number, string>;
  readonly unchanged: number;
}

export class RedriveError extends PipelineError {}

/**
 * What the records need before they can be judged (the transform's `prepare`: registry schemas) could not be had:
 * the registry did not answer, or refused the redriver's credentials. Never taken as a new reason to send a dead
 * letter; the run stops, saying what it did and did not send.
 */
export class RedriveRegistryUnavailableError extends RedriveError {}

/**
 * Another `eos redrive` run closed this run's round while it staged (two runs at once): what either staged is
 * staged once, and the rest waits for the next run after the next checkpoint.
 */
export class RedriveRoundClosedError extends RedriveError {}

function isDeadLetterRow(row: Record<string, unknown>): row is Record<string, unknown> & {
  source: { topic: string; partition: number; offset: number };
  error: string;
  raw: DeadLetter['raw'];
} {
  const source = row.source as { topic?: unknown; partition?: unknown; offset?: unknown } | undefined;
  const raw = row.raw as { key?: unknown; value?: unknown; headers?: unknown } | undefined;
  return (
    typeof source?.topic === 'string' &&
    Number.isSafeInteger(source.partition) &&
    Number.isSafeInteger(source.offset) &&
    typeof row.error === 'string' &&
    typeof raw === 'object' &&
    raw !== null &&
    (raw.key === null || typeof raw.key === 'string') &&
    (raw.value === null || typeof raw.value === 'string') &&
    Array.isArray(raw.headers)
  );
}

/**
 * Dead letters written before headers were kept in order carry them as an object (`{name: base64}`): listed here
 * as `[{name, value}]`, in the object's order, so such a row is redriven too.
 */
function withHeadersListed(row: Record<string, unknown>): void {
  const raw = row.raw as { headers?: unknown } | undefined;
  const headers = raw?.headers;
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers)) return;
  const entries = Object.entries(headers as Record<string, unknown>);
  if (entries.every(([, value]) => typeof value === 'string')) {
    raw!.headers = entries.map(([name, value]) => ({ name, value }));
  }
}

/** The record a dead letter was made from, as the processor decoded it then. */
export function recordOf(letter: DeadLetter, partition: number): DecodedRecord {
  const record: MskRecord = {
    topic: letter.topic,
    partition,
    offset: letter.offset,
    // Dead letters written before redrive existed carry no timestamp: 0 (the epoch) then.
    timestamp: letter.raw.timestamp ?? 0,
    timestampType: 'CREATE_TIME',
    key: letter.raw.key,
    value: letter.raw.value,
    headers: letter.raw.headers.map((header) => ({
      [header.name]: signedHeaderBytes(Buffer.from(header.value, 'base64')),
    })),
  };
  return decodeRecord(record);
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
    const { manifests, states } = await this.read();
    const lastCut = manifests[manifests.length - 1]?.cut ?? {};
    const plans = states.map((state) => this.plan(state, lastCut));
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

  /** Every committed dead letter and redriven offset, and the round fences, per (lane, partition). */
  private async read(): Promise<{ manifests: Manifest[]; states: PartitionState[] }> {
    const { settings, clients } = this.options;
    const source = { s3: clients.s3, bucket: settings.bucket, pipeline: settings.pipelineId };
    const states = new Map<string, PartitionState>();
    const stateOf = (lane: string, partition: number): PartitionState => {
      const id = partitionId(lane, partition);
      let state = states.get(id);
      if (!state) {
        state = { lane, partition, latest: new Map(), redriven: new Set(), rounds: [], unreadable: 0 };
        states.set(id, state);
      }
      return state;
    };
    const manifests: Manifest[] = [];
    // Only the dead letters readers show are redriven: a replay generation's before its switch, or the range a
    // switch took from the earlier generation, are nobody's to redrive.
    const view = new GenerationView();
    for await (const manifest of readManifests(source)) {
      manifests.push(manifest);
      view.apply(manifest);
    }
    for (const manifest of manifests) {
      for (const file of manifest.files) await this.readFile(source, manifest, file, stateOf, view);
    }
    const items = await readFenceItems(
      ledgerDocumentClient(clients.dynamodb),
      settings.ledgerTable,
      settings.pipelineId,
    );
    for (const item of items) {
      const lane = typeof item.topic === 'string' ? parseLane(item.topic) : undefined;
      if (lane?.round === undefined || typeof item.stagedOffset !== 'number') continue;
      const state = stateOf(sourceLaneOf(item.topic as string), item.partition as number);
      state.rounds.push({
        round: lane.round,
        stagedOffset: item.stagedOffset,
        closed: item[CLOSED_ATTRIBUTE] !== undefined,
      });
    }
    for (const state of states.values()) state.rounds.sort((a, b) => a.round - b.round);
    return { manifests, states: [...states.values()].sort(byLaneAndPartition) };
  }

  private async readFile(
    source: { s3: AwsClients['s3']; bucket: string; pipeline: string },
    manifest: Manifest,
    file: ManifestFile,
    stateOf: (lane: string, partition: number) => PartitionState,
    view: GenerationView,
  ): Promise<void> {
    const lane = parseLane(file.topic);
    if (lane === undefined) return;
    const round = lane.round ?? 0;
    // Output of the original lanes is never needed; output of a round lane says which records it redrove.
    if (file.stream === 'output' && round === 0) return;
    if (file.stream === 'deadletter' && view.visibility(file) === 'none') return;
    // Taken on the first row the run keeps: a partition whose dead letters a switch hides is nobody's to report.
    const state = () => stateOf(sourceLaneOf(file.topic), file.partition);
    // Checked as the committed reader checks it; a slice of a merged object by one ranged read of its bytes.
    for await (const row of readCommittedFile(source, file, manifest.checkpointId)) {
      const offset = (row.source as { offset?: unknown } | undefined)?.offset;
      if (!Number.isSafeInteger(offset)) continue;
      // Output of a round, or a round's note that it resolved the record without a row (a duplicate, state only).
      if (file.stream === 'output' || (round > 0 && row.resolved === true)) {
        state().redriven.add(offset as number);
        continue;
      }
      // A schema misfit's dead letter (written by promote) holds a row, not a record: nothing to redrive.
      // In a round lane it is that round's outcome for the record: handled.
      if ('row' in row) {
        const held = state();
        if (round > 0) held.redriven.add(offset as number);
        continue;
      }
      if (!view.shows(file.topic, file.partition, offset as number)) continue;
      withHeadersListed(row);
      if (!isDeadLetterRow(row)) {
        // Not silently: the run reports how many it could not read.
        state().unreadable++;
        continue;
      }
      const known = state().latest.get(row.source.offset);
      if (known !== undefined && known.round > round) continue;
      state().latest.set(row.source.offset, {
        offset: row.source.offset,
        topic: row.source.topic,
        error: row.error,
        raw: row.raw,
        round,
        checkpointId: manifest.checkpointId,
      });
    }
  }

  /** Which round a (lane, partition) runs and the dead letters it may send; or its outcome, when it runs none. */
  private plan(state: PartitionState, lastCut: Readonly<Record<string, number>>): PartitionPlan {
    const { lane, partition } = state;
    const base = {
      lane,
      partition,
      sent: 0,
      staged: { output: 0, deadLettered: 0 },
      unchanged: 0,
      unreadable: state.unreadable,
    };
    const letters = [...state.latest.values()]
      .filter((letter) => !state.redriven.has(letter.offset))
      .filter(
        (letter) => this.options.checkpoint === undefined || letter.checkpointId === this.options.checkpoint,
      )
      .sort((a, b) => a.offset - b.offset);
    const last = state.rounds[state.rounds.length - 1];
    let round: number;
    if (last !== undefined && !last.closed) {
      round = last.round; // an interrupted run: go on with its round
    } else {
      if (letters.length === 0) return { done: { ...base, outcome: 'nothing' } };
      if (
        last !== undefined &&
        (lastCut[partitionId(redriveLaneOf(lane, last.round), partition)] ?? -1) < last.stagedOffset
      ) {
        return { done: { ...base, round: last.round, outcome: 'waiting' } };
      }
      round = (last?.round ?? 0) + 1;
    }
    // An interrupted round goes on above its fence: what lies at or below it, this round has handled already (a
    // batch re-sent from below would be judged against fingerprints of its last batches only). A record below it
    // that this round did not take is a candidate of the next round.
    const resumedAt = last?.round === round ? last.stagedOffset : -1;
    const candidates = letters
      .filter((letter) => letter.offset > resumedAt)
      .map((letter) => ({ letter, record: recordOf(letter, partition) }));
    return { state, base, round, resumedAt, candidates };
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

/** The failed lookup in one line: the registry's own words (a URL without credentials, or a Glue id). */
function lookupFailure(error: unknown): string {
  if (error instanceof SchemaRegistryUnavailableError) {
    const cause = error.cause instanceof Error ? ` (${error.cause.message})` : '';
    return `schema registry lookup ${error.registry} failed${cause}`;
  }
  return `the transform could not prepare the records to judge (${(error as Error)?.message ?? String(error)})`;
}

function byLaneAndPartition(a: PartitionState, b: PartitionState): number {
  return a.lane < b.lane ? -1 : a.lane > b.lane ? 1 : a.partition - b.partition;
}

export async function redrive(options: RedriveOptions): Promise<RedriveResult> {
  return new Redriver(options).run();
}
