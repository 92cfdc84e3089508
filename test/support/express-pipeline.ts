/**
 * A pipeline for the Express workflow's adversarial tests: the synthesized definitions run by the local runner
 * against this file's table and bucket, with runners that can be one execution delivered twice (the same execution
 * name), see every AWS call of their steps, and a coordinator to call directly for zombie steps.
 */
import {
  type CheckpointOutcome,
  type CoordinatorHooks,
  createLocalCoordinator,
  type LocalCoordinator,
} from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import type { Coordinator } from '../../shared/coordinator/coordinator.ts';
import type { CoordinatorStep } from '../../shared/coordinator/definition.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import type { SynthesizedCoordinator } from './asl.ts';
import { type TestResources, uniqueName } from './aws.ts';
import { hookedClients, type ServiceHook } from './hooked-clients.ts';
import { mskEvent, orderRecords } from './msk.ts';

export const LEASE_SECONDS = 600;
/** Past any lease written "now". */
export const PAST_LEASE_MS = LEASE_SECONDS * 1000 + 1;

/** Hooks under which every start of `step` fails with `message`, before the step runs. */
export const failBefore = (step: CoordinatorStep, message: string): CoordinatorHooks => ({
  beforeStep: (at) => {
    if (at === step) throw new Error(message);
  },
});

/** The id the local runner gives an Express execution of `name` (`coordinator-runner.ts`). */
export const expressId = (name: string) =>
  `arn:aws:states:local:000000000000:express:eos-coordinator:${name}`;

export interface RunnerOptions {
  /** The execution's name: two runners with one name are one execution delivered twice. */
  readonly name?: string;
  readonly hooks?: CoordinatorHooks;
  /** Sees every S3 and DynamoDB call of this runner's steps. */
  readonly hook?: ServiceHook;
  /** Another definition to start with than the deployed Express one. */
  readonly definition?: Record<string, unknown>;
}

export interface ExpressPipeline {
  readonly settings: Settings;
  readonly clock: ManualClock;
  readonly store: CheckpointStore;
  /** A coordinator for zombie steps: called directly, as a Lambda of a dead execution would run. */
  readonly core: Coordinator;
  readonly stage: (partition: number, from: number, count: number) => Promise<void>;
  readonly runner: (options?: RunnerOptions) => LocalCoordinator;
  readonly run: (options?: RunnerOptions) => Promise<CheckpointOutcome>;
  /** Runs checkpoints (each past the last lease) until one finds nothing to commit; returns them. */
  readonly settle: () => Promise<CheckpointOutcome[]>;
}

/**
 * A fresh pipeline id on `res`. `partitionsPerShard`: 1 deals each changed partition a shard of its own (several
 * Map items, several votes).
 */
export function expressPipeline(
  res: TestResources,
  deployed: SynthesizedCoordinator,
  {
    prefix = 'xp',
    partitionsPerShard,
  }: { readonly prefix?: string; readonly partitionsPerShard?: number } = {},
): ExpressPipeline {
  const settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName(prefix),
    checkpointLeaseSeconds: LEASE_SECONDS,
    orphanGraceSeconds: 3600,
  });
  const clock = new ManualClock(Date.now());
  const processor = createProcessor({ settings, clients: res.clients });
  const shards = partitionsPerShard ? { partitionsPerShard } : {};
  const runner = (options: RunnerOptions = {}) =>
    createLocalCoordinator({
      settings,
      clients: options.hook ? hookedClients(options.hook) : res.clients,
      clock,
      ...shards,
      ...deployed.runOptions,
      ...(options.definition ? { definition: options.definition } : {}),
      ...(options.name ? { executionName: () => options.name! } : {}),
      ...(options.hooks ? { hooks: options.hooks } : {}),
    });
  const p: ExpressPipeline = {
    settings,
    clock,
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    core: createLocalCoordinator({ settings, clients: res.clients, clock, ...shards }).coordinator,
    stage: async (partition, from, count) => {
      await processor.processEvent(mskEvent(orderRecords(partition, from, count)));
    },
    runner,
    run: (options) => runner(options).runCheckpoint(),
    settle: async () => {
      const outcomes: CheckpointOutcome[] = [];
      for (let i = 0; i < 6; i++) {
        clock.advance(PAST_LEASE_MS);
        const outcome = await p.run();
        outcomes.push(outcome);
        if (outcome.status === 'empty') return outcomes;
      }
      throw new Error(`the pipeline did not settle: ${outcomes.map((o) => o.status).join(', ')}`);
    },
  };
  return p;
}

/** The workflows an outcome's executions ran on, in order. */
export const workflows = (outcome: CheckpointOutcome) => outcome.executions.map((e) => e.workflow);
/** The steps an outcome invoked, in order. */
export const steps = (outcome: CheckpointOutcome) => outcome.invocations.map((i) => i.step);

/** A zombie step's call: what it answered, or the name of what it threw. */
export async function attempt(call: () => Promise<unknown>): Promise<unknown> {
  try {
    return await call();
  } catch (error) {
    return error instanceof Error ? error.name : String(error);
  }
}

const text = (value: unknown) => JSON.stringify(value);
/** A DynamoDB call that reads the checkpoint head (`CheckpointStore.readHead`): for a client hook. */
export const readsHead = (command: string, input: Record<string, unknown>) =>
  command === 'GetItemCommand' && text(input.Key).includes('"HEAD"');
