/**
 * `eos local --scenario replay` (shared/replay/): once the run's input is committed, an operator replays
 * the middle half of every partition with a changed transform into generation 1 and asks for the switch at once;
 * a second event source mapping (a second emulator over the same log, from its start) feeds the processor in
 * replay mode, crashing once at a seeded step and redelivering batches when faults are injected, while checkpoints
 * run under the run's coordinator faults. After every checkpoint the readers' view is checked: the range all old
 * (before the manifest that switches) or all new (from it on), everything outside the range unchanged, no record
 * twice, none missing. The run's verdict then judges the final view against the input (`runner.ts`).
 */
import type { AwsClients } from '../shared/aws/clients.ts';
import type { Settings } from '../shared/config/settings.ts';
import { InjectedCrashError } from '../shared/errors.ts';
import type { DecodedRecord } from '../shared/kafka/record.ts';
import { epochLaneOf, generationOfLane } from '../shared/ledger/epochs.ts';
import type { Stream } from '../shared/ledger/layout.ts';
import { createProcessor, type ProcessorStep } from '../shared/processor/processor.ts';
import { planReplay, replayStatus, requestSwitch } from '../shared/replay/replay.ts';
import { readCommitted, readManifests } from '../shared/sink/reader.ts';
import type { Transform } from '../shared/transforms/types.ts';
import type { Checkpointer } from './checkpoints.ts';
import type { MskEmulator } from './msk-emulator.ts';
import type { RunClock } from './run-clock.ts';

/** What the replay scenario did. */
export interface ReplayReport {
  readonly generation: number;
  /** The replayed offsets (at most: a shorter partition's range ends at its last record). */
  readonly from: number;
  readonly to: number;
  readonly partitions: number;
  /** Records the replay mapping delivered (redeliveries included). */
  readonly delivered: number;
  /** Whether the replay processor crashed once (and its batch came again). */
  readonly crashed: boolean;
  /** Reader views checked after checkpoints, and how many of them the switch had reached. */
  readonly viewsChecked: number;
  readonly viewsSwitched: number;
  /** The checkpoint whose manifest switched (undefined: never: a violation). */
  readonly switchedIn?: number;
  /** What a view showed that it must not (empty when none). */
  readonly violations: readonly string[];
}

export interface ReplayScenario {
  readonly settings: Settings;
  readonly clients: AwsClients;
  readonly clock: RunClock;
  readonly checkpointer: Checkpointer;
  /** A second mapping over the run's log, from its start. */
  readonly emulator: MskEmulator;
  readonly topic: string;
  /** Per partition, how many records the log holds. */
  readonly lengths: readonly number[];
  /** The changed transform the replay runs with. */
  readonly transform: Transform;
  readonly seed: number;
  /** Inject one replay processor crash and redeliveries. */
  readonly faults: boolean;
}

/** A view row: stream, source position (epoch lane, partition, offset), and the generation it came from. */
interface ViewRow {
  readonly id: string;
  readonly offset: number;
  readonly generation: number;
}

async function readerView(settings: Settings, clients: AwsClients): Promise<ViewRow[]> {
  const rows: ViewRow[] = [];
  for (const stream of ['output', 'deadletter'] as Stream[]) {
    for await (const { file, row } of readCommitted({
      s3: clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
      stream,
    })) {
      const offset = (row.source as { offset: number }).offset;
      rows.push({
        id: `${stream}|${epochLaneOf(file.topic)}#${file.partition}@${offset}`,
        offset,
        generation: generationOfLane(file.topic),
      });
    }
  }
  return rows;
}

const CRASH_STEPS: readonly ProcessorStep[] = [
  'after-claims',
  'before-stage-write',
  'after-stage-write',
  'after-transaction',
  'before-return',
];

export async function replayAfter(scenario: ReplayScenario): Promise<ReplayReport> {
  const { settings, clients, clock, checkpointer, emulator } = scenario;
  const target = { clients, table: settings.ledgerTable, pipeline: settings.pipelineId };
  // The middle half of the longest partition; a shorter one replays what it has of it (planReplay clamps `to` to
  // each partition's last staged offset, and skips one that ends before `from`).
  const longest = Math.max(...scenario.lengths);
  const from = Math.floor(longest / 4);
  const to = Math.max(from, Math.floor((3 * longest) / 4) - 1);
  const inRange = (offset: number) => offset >= from && offset <= to;
  const before = await readerView(settings, clients);
  const beforeIds = before.map((row) => row.id).sort();
  const { plan } = await planReplay({
    ...target,
    topic: scenario.topic,
    fromOffset: from,
    toOffset: to,
    clock,
  });
  // Asked at once: the switch waits until every range is staged and committed.
  await requestSwitch(target, plan.generation, clock);

  const violations: string[] = [];
  let viewsChecked = 0;
  let viewsSwitched = 0;
  const check = async () => {
    const view = await readerView(settings, clients);
    viewsChecked++;
    const ids = view.map((row) => row.id).sort();
    const twice = ids.filter((id, i) => i > 0 && ids[i - 1] === id);
    if (twice.length > 0)
      violations.push(`view ${viewsChecked}: ${twice.length} records shown twice (${twice[0]})`);
    // Switched by the manifest log itself (what readers follow), not by the plan's note of it.
    const switched = await switchedInLog(settings, clients, plan.generation);
    if (switched) viewsSwitched++;
    const outside = (rows: readonly ViewRow[]) =>
      rows.filter((row) => !inRange(row.offset)).map((row) => row.id);
    if (JSON.stringify(outside(view).sort()) !== JSON.stringify(outside(before).sort())) {
      violations.push(`view ${viewsChecked}: records outside the range changed`);
    }
    const range = view.filter((row) => inRange(row.offset));
    const wanted = switched ? plan.generation : 0;
    const other = range.filter((row) => row.generation !== wanted);
    if (other.length > 0) {
      violations.push(
        `view ${viewsChecked}: ${other.length} records of the range from generation ${other[0]!.generation} while ${switched ? 'switched' : 'not switched'}`,
      );
    }
    if (!switched && JSON.stringify(ids) !== JSON.stringify(beforeIds)) {
      violations.push(`view ${viewsChecked}: the view changed before the switch`);
    }
  };

  const crashStep = scenario.faults ? CRASH_STEPS[scenario.seed % CRASH_STEPS.length] : undefined;
  let crashArmed = crashStep !== undefined;
  let crashed = false;
  const processor = createProcessor({
    settings: { ...settings, replayGeneration: plan.generation },
    clients,
    transform: scenario.transform,
    clock,
    hooks: {
      onStep: (step) => {
        if (crashArmed && step === crashStep) {
          crashArmed = false;
          crashed = true;
          throw new InjectedCrashError(`replay processor ${step}`);
        }
      },
    },
  });
  let delivered = 0;
  let deliveries = 0;
  while (!emulator.isDrained()) {
    const delivery = emulator.poll();
    if (delivery === undefined)
      throw new Error('the replay mapping has nothing ready although records are pending');
    delivered += delivery.recordCount;
    deliveries++;
    try {
      await processor.processEvent(delivery.event);
    } catch (error) {
      if (!(error instanceof InjectedCrashError)) throw error;
      emulator.release(delivery); // the mapping delivers the batch again
      continue;
    }
    // With faults, every third acknowledgement is lost: the batch comes again, already staged.
    if (scenario.faults && deliveries % 3 === 0 && delivery.slices.every((slice) => slice.attempt === 1)) {
      emulator.release(delivery);
    } else {
      emulator.commit(delivery);
    }
    if (deliveries % 2 === 0) {
      await checkpointer.run();
      await check();
    }
  }
  for (let i = 0; i < 4 && (await replayStatus(target))[0]?.phase !== 'switched'; i++) {
    await checkpointer.final();
    await check();
  }
  const status = (await replayStatus(target))[0];
  if (status?.phase !== 'switched') violations.push('the replay never switched');
  return {
    generation: plan.generation,
    from,
    to,
    partitions: plan.ranges.length,
    delivered,
    crashed,
    viewsChecked,
    viewsSwitched,
    ...(status?.plan.switchedIn === undefined ? {} : { switchedIn: status.plan.switchedIn }),
    violations,
  };
}

/** Whether a committed manifest names the switch to `generation`. */
async function switchedInLog(settings: Settings, clients: AwsClients, generation: number): Promise<boolean> {
  for await (const manifest of readManifests({
    s3: clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    if (manifest.generations?.some((change) => change.generation === generation)) return true;
  }
  return false;
}

/** The transform readers' final view follows: `changed` for the replayed offsets, `live` elsewhere. */
export function replayedTransform(live: Transform, changed: Transform, from: number, to: number): Transform {
  return {
    name: `${live.name} / ${changed.name} in ${from}..${to}`,
    ...(live.valueFormat ? { valueFormat: live.valueFormat } : {}),
    ...(changed.prepare ? { prepare: (records: readonly DecodedRecord[]) => changed.prepare!(records) } : {}),
    apply: (record) => (record.offset >= from && record.offset <= to ? changed : live).apply(record),
  };
}
