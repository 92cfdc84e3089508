/**
 * Runs ONE checkpoint locally with the same state machine definition that deploys: the ASL from
 * `shared/coordinator/definition.ts` (or, in the state machine tests, the one taken back from the synthesized
 * CDK template) executed by aws-local-stepfunctions, its Lambda tasks bound to the coordinator's steps running
 * in-process against the local parts.
 *
 * ```ts
 * const local = createLocalCoordinator({ settings, clients, clock?, hooks?, definition?, functionSteps? });
 * const outcome: CheckpointOutcome = await local.runCheckpoint();
 * // outcome.status: 'committed' | 'aborted' | 'busy' | 'empty' | 'incomplete' | 'failed'
 * ```
 *
 * - `hooks.beforeStep(step, payload)` / `hooks.afterStep(step, payload, result)` run around every Lambda
 *   invocation; throwing from them injects a crash at that step — before its effects, or after them with the
 *   result lost (throw `InjectedCrashError` from `shared/errors.ts`: the definition retries it like any
 *   transient failure; any other error is treated as a deterministic failure).
 * - `hooks.failedStep(step, payload, error)` sees each failed invocation's own error (`eos checkpoint` names it).
 * - Retry waits are overridden to 0 ms, so retries are instant.
 * - `definition` + `functionSteps` (FunctionName/ARN → step) run another definition, e.g. the synthesized one.
 *   Without them, {@link localDefinition} is used, for the `workflow` option (default `express`, as deployed).
 * - An Express definition's `HandOff` state (`definition.ts`) starts the Standard one: here, once the Express
 *   execution has ended, `runCheckpoint` runs `handOffDefinition` (default the local Standard definition) and
 *   reports both executions.
 * - Needs `Promise.withResolvers` (Node 22+, or the polyfill in `test/support/polyfills.ts`).
 */
import { randomUUID } from 'node:crypto';
import {
  ExecutionError,
  type RunOptions,
  StateMachine,
  type StateMachineDefinition,
} from 'aws-local-stepfunctions';
import type { AwsClients } from '../shared/aws/clients.ts';
import type { Clock } from '../shared/clock.ts';
import type { Settings } from '../shared/config/settings.ts';
import {
  type Coordinator,
  type CoordinatorLog,
  createCoordinator,
} from '../shared/coordinator/coordinator.ts';
import {
  buildCoordinatorDefinition,
  COORDINATOR_STEPS,
  type CoordinatorStep,
  type CoordinatorTask,
  functionArnSubstitution,
  HAND_OFF_STATE_NAME,
  PUBLISH_STEP,
  STANDARD_STATE_MACHINE_SUBSTITUTION,
  type Workflow,
} from '../shared/coordinator/definition.ts';
import type { PromotionLimits } from '../shared/coordinator/promote/promoter.ts';
import { tablePublisher } from '../shared/coordinator/publish/step.ts';
import type { PublishTarget } from '../shared/coordinator/publish/target.ts';

export interface CoordinatorHooks {
  beforeStep?(step: CoordinatorStep, payload: unknown): void | Promise<void>;
  afterStep?(step: CoordinatorStep, payload: unknown, result: unknown): void | Promise<void>;
  /**
   * A step's invocation failed with `error` (the state machine then retries it, aborts or ends incomplete): the
   * Fail state keeps only its own error name, so this is where the step's own error can be seen.
   */
  failedStep?(step: CoordinatorStep, payload: unknown, error: unknown): void;
  /**
   * Around the publish step, after Commit or catching up on an idle pipeline (a definition with a table only);
   * throwing injects a crash as above.
   */
  beforePublish?(payload: unknown): void | Promise<void>;
  afterPublish?(payload: unknown, result: unknown): void | Promise<void>;
}

export interface LocalCoordinatorOptions {
  readonly settings: Settings;
  readonly clients: AwsClients;
  readonly clock?: Clock;
  readonly hooks?: CoordinatorHooks;
  readonly log?: CoordinatorLog;
  readonly promotionLimits?: Partial<PromotionLimits>;
  /** Changed partitions per shard; default the coordinator's (`shared/coordinator/shards.ts`). */
  readonly partitionsPerShard?: number;
  /** An ASL definition whose Lambda tasks name their function by ARN; default {@link localDefinition}. */
  readonly definition?: Record<string, unknown>;
  /** FunctionName (ARN) → step, for `definition` (and `handOffDefinition`). */
  readonly functionSteps?: Readonly<Record<string, CoordinatorTask>>;
  /** The workflow of the built-in definition (without `definition`). Default `express`, as deployed. */
  readonly workflow?: Workflow;
  /** What an Express definition's `HandOff` starts; default the local Standard definition. */
  readonly handOffDefinition?: Record<string, unknown>;
  /**
   * The Iceberg table each committed checkpoint is published to: the definition then has the `Publish` step
   * (`definition.ts`). Default: none.
   */
  readonly publishTarget?: PublishTarget;
  /** Names executions; default a random UUID. */
  readonly executionName?: () => string;
}

export const CHECKPOINT_OUTCOMES = ['committed', 'aborted', 'busy', 'empty', 'incomplete', 'failed'] as const;
export type CheckpointOutcomeStatus = (typeof CHECKPOINT_OUTCOMES)[number];

export interface StepInvocation {
  readonly step: CoordinatorTask;
  /** JSON size of the Lambda payload and of its result (Step Functions' limit is 256 KB). */
  readonly payloadBytes: number;
  readonly resultBytes: number;
  readonly failed: boolean;
  readonly durationMs: number;
}

/** One execution of a checkpoint's run: an Express one that handed off is followed by a Standard one. */
export interface ExecutionRun {
  readonly workflow: Workflow;
  readonly execution: string;
  /** States entered and retried in this execution: what a Standard workflow bills. */
  readonly transitions: number;
  /** From start to end: what an Express workflow bills (with its memory), here on the local interpreter. */
  readonly durationMs: number;
}

export interface CheckpointOutcome {
  readonly status: CheckpointOutcomeStatus;
  /** The execution whose end this outcome reports: the Standard one after a hand-off. */
  readonly execution: string;
  /** The checkpoint this execution worked on (0 when none). */
  readonly checkpointId: number;
  /** The Fail state's error and cause, or the interpreter's. */
  readonly error?: string;
  readonly cause?: string;
  /** The execution's final state data (succeeded executions). */
  readonly output?: unknown;
  readonly invocations: readonly StepInvocation[];
  /** History events the interpreter logged (an estimate of Step Functions' count). */
  readonly events: number;
  /**
   * State transitions of every execution: every state entered, inside a Map's iterations too (an inline Map's
   * iterations themselves are not billed), and every retry of a state. A Standard workflow bills them; see
   * `executions` for which workflow ran them.
   */
  readonly transitions: number;
  /** The executions, in order: one, or an Express one that handed off and the Standard one it started. */
  readonly executions: readonly ExecutionRun[];
  /** The largest state input/output the interpreter saw, in bytes of JSON. */
  readonly maxStateBytes: number;
}

export interface LocalCoordinator {
  readonly coordinator: Coordinator;
  runCheckpoint(): Promise<CheckpointOutcome>;
}

const LOCAL_ARN = (step: CoordinatorTask): string =>
  `arn:aws:lambda:local:000000000000:function:eos-coordinator-${step}`;

/** Replaces `${Name}` placeholders (definitionSubstitutions) throughout a definition. */
export function substitute(definition: unknown, values: Readonly<Record<string, string>>): unknown {
  return JSON.parse(
    JSON.stringify(definition).replace(
      /\$\{([A-Za-z0-9_]+)\}/g,
      (whole, name: string) => values[name] ?? whole,
    ),
  );
}

export const LOCAL_STANDARD_ARN = 'arn:aws:states:local:000000000000:stateMachine:eos-coordinator-standard';

/** The deployable definition with local ARNs in place of the Lambda (and Standard workflow) substitutions. */
export function localDefinition({
  publish = false,
  workflow = 'standard',
}: {
  readonly publish?: boolean;
  readonly workflow?: Workflow;
} = {}): {
  definition: Record<string, unknown>;
  functionSteps: Record<string, CoordinatorTask>;
} {
  const steps: CoordinatorTask[] = publish ? [...COORDINATOR_STEPS, PUBLISH_STEP] : [...COORDINATOR_STEPS];
  const values = {
    ...Object.fromEntries(steps.map((step) => [functionArnSubstitution(step), LOCAL_ARN(step)])),
    [STANDARD_STATE_MACHINE_SUBSTITUTION]: LOCAL_STANDARD_ARN,
  };
  return {
    definition: substitute(buildCoordinatorDefinition({ publish, workflow }), values) as Record<
      string,
      unknown
    >,
    functionSteps: Object.fromEntries(steps.map((step) => [LOCAL_ARN(step), step])),
  };
}

type StateJson = {
  Type?: string;
  Retry?: unknown;
  ItemProcessor?: { States?: Record<string, StateJson> };
  Iterator?: { States?: Record<string, StateJson> };
};

/** Every state (Map processors included), by name. */
function allStates(states: Record<string, StateJson>): Array<[string, StateJson]> {
  return Object.entries(states).flatMap(([name, state]) => [
    [name, state] as [string, StateJson],
    ...allStates((state.ItemProcessor ?? state.Iterator)?.States ?? {}),
  ]);
}

type LocalHandler = NonNullable<NonNullable<RunOptions['overrides']>['taskResourceLocalHandlers']>[string];
type JsonValue = Parameters<LocalHandler>[0];

const size = (value: unknown): number => Buffer.byteLength(JSON.stringify(value ?? null));

const machines = new Map<string, StateMachine>();

/**
 * The interpreter for `definition`, made once per definition and process. Validation (asl-validator, through
 * ajv) costs 1.5-2 s of CPU on this machine the first time, a fifth of a short `eos local` run, so only a
 * definition the caller brings is validated here. The built-in one ({@link localDefinition}) is the deployable
 * definition, which test/infra/local-layout.test.ts and test/coordinator/state-machine.test.ts validate with asl-validator.
 * `source` (the definition's JSON, the key) is taken before the first run: the interpreter is not trusted to leave
 * the object as it found it.
 */
function machineFor(definition: Record<string, unknown>, source: string, validate: boolean): StateMachine {
  let machine = machines.get(source);
  if (!machine) {
    machine = new StateMachine(definition as unknown as StateMachineDefinition, {
      validationOptions: validate ? { checkArn: false, checkPaths: false } : { noValidate: true },
    });
    machines.set(source, machine);
  }
  return machine;
}

/** The outcome of an execution that succeeded, by begin's action. */
function succeededStatus(action: string | undefined): CheckpointOutcomeStatus {
  // `publish` found nothing to commit either: it only published a committed checkpoint the table lacked.
  return action === 'busy' ? 'busy' : action === 'empty' || action === 'publish' ? 'empty' : 'committed';
}

/** The outcome of an execution that failed, by its Fail state's error. */
function failedStatus(errorName: string): CheckpointOutcomeStatus {
  if (errorName === 'CheckpointAborted') return 'aborted';
  return errorName === 'CheckpointCommitIncomplete' ? 'incomplete' : 'failed';
}

/** A definition ready to run: its states by name, whether the caller brought it (validated), its cache key. */
interface Runnable {
  readonly definition: Record<string, unknown>;
  readonly states: Array<[string, StateJson]>;
  readonly workflow: Workflow;
  readonly validate: boolean;
  readonly source: string;
}

function runnable(definition: Record<string, unknown>, validate: boolean): Runnable {
  const top = (definition as { States: Record<string, StateJson> }).States;
  return {
    definition,
    states: allStates(top),
    // An Express definition is the one that can hand off (`definition.ts`).
    workflow: HAND_OFF_STATE_NAME in top ? 'express' : 'standard',
    validate,
    source: `${validate}:${JSON.stringify(definition)}`,
  };
}

/** What one execution left: its outcome so far, and whether it handed off to the Standard workflow. */
interface ExecutionResult {
  readonly outcome: CheckpointOutcome;
  readonly handedOff: boolean;
}

export function createLocalCoordinator(options: LocalCoordinatorOptions): LocalCoordinator {
  const coordinator = createCoordinator({
    settings: options.settings,
    clients: options.clients,
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.log ? { log: options.log } : {}),
    ...(options.promotionLimits ? { promotionLimits: options.promotionLimits } : {}),
    ...(options.partitionsPerShard ? { partitionsPerShard: options.partitionsPerShard } : {}),
    ...(options.publishTarget ? { publisher: tablePublisher(options.publishTarget) } : {}),
  });
  const publish = options.publishTarget !== undefined;
  const fallback = localDefinition({ publish, workflow: options.workflow ?? 'express' });
  const functionSteps = options.functionSteps ?? fallback.functionSteps;
  const entry = runnable(options.definition ?? fallback.definition, options.definition !== undefined);
  // Built on the first hand-off only: most checkpoints never hand off.
  let standard: Runnable | undefined;
  const handOffTarget = () =>
    (standard ??= runnable(
      options.handOffDefinition ?? localDefinition({ publish, workflow: 'standard' }).definition,
      options.handOffDefinition !== undefined,
    ));

  const invoke =
    (invocations: StepInvocation[]) =>
    async (input: JsonValue): Promise<JsonValue> => {
      const { FunctionName, Payload } = input as unknown as { FunctionName: string; Payload: unknown };
      const step = functionSteps[FunctionName];
      if (!step) throw new Error(`no local handler for function ${FunctionName}`);
      const started = performance.now();
      const took = () => Math.round(performance.now() - started);
      try {
        await (step === PUBLISH_STEP
          ? options.hooks?.beforePublish?.(Payload)
          : options.hooks?.beforeStep?.(step, Payload));
        const result = await (coordinator[step] as (payload: unknown) => Promise<unknown>).call(
          coordinator,
          Payload,
        );
        await (step === PUBLISH_STEP
          ? options.hooks?.afterPublish?.(Payload, result)
          : options.hooks?.afterStep?.(step, Payload, result));
        invocations.push({
          step,
          payloadBytes: size(Payload),
          resultBytes: size(result),
          failed: false,
          durationMs: took(),
        });
        return { Payload: result } as unknown as JsonValue;
      } catch (error) {
        if (step !== PUBLISH_STEP) options.hooks?.failedStep?.(step, Payload, error);
        invocations.push({
          step,
          payloadBytes: size(Payload),
          resultBytes: 0,
          failed: true,
          durationMs: took(),
        });
        throw error;
      }
    };

  async function runExecution(machine: Runnable, input: JsonValue): Promise<ExecutionResult> {
    const invocations: StepInvocation[] = [];
    let handOffs = 0;
    // Starting the Standard execution is all the HandOff task does; it runs once this execution has ended.
    const handOff = async (): Promise<JsonValue> => {
      handOffs++;
      return {} as JsonValue;
    };
    const taskResourceLocalHandlers = Object.fromEntries(
      machine.states
        .filter(([, state]) => state.Type === 'Task')
        .map(([name]) => [name, name === HAND_OFF_STATE_NAME ? handOff : invoke(invocations)]),
    );
    const retryIntervalOverrides = Object.fromEntries(
      machine.states.filter(([, s]) => s.Retry).map(([name]) => [name, 0]),
    );
    const name = options.executionName?.() ?? randomUUID();
    const execution = `arn:aws:states:local:000000000000:${machine.workflow === 'express' ? 'express' : 'execution'}:eos-coordinator:${name}`;
    const started = performance.now();
    const run = machineFor(machine.definition, machine.source, machine.validate).run(input, {
      overrides: { taskResourceLocalHandlers, retryIntervalOverrides },
      context: { Execution: { Id: execution, Name: name } },
    });
    let events = 0;
    let transitions = 0;
    let maxStateBytes = 0;
    let seenCheckpointId = 0;
    const logged = (async () => {
      for await (const event of run.eventLogs) {
        events++;
        if (event.type === 'StateEntered' || event.type === 'StateRetried') transitions++;
        const state = (event as { state?: { input?: unknown; output?: unknown } }).state;
        if (!state) continue;
        maxStateBytes = Math.max(maxStateBytes, size(state.input), size(state.output));
        const id = (state.output as { checkpoint?: { checkpointId?: unknown } } | null)?.checkpoint
          ?.checkpointId;
        if (typeof id === 'number' && id > 0) seenCheckpointId = id;
      }
    })();
    // What every outcome of this execution carries, read once it has ended.
    const counted = () => ({
      execution,
      invocations,
      events,
      transitions,
      executions: [
        {
          workflow: machine.workflow,
          execution,
          transitions,
          durationMs: Math.round(performance.now() - started),
        },
      ],
      maxStateBytes,
    });
    try {
      const output = (await run.result) as { checkpoint?: { action?: string; checkpointId?: number } };
      await logged;
      const action = output.checkpoint?.action;
      const outcome = {
        ...counted(),
        status: succeededStatus(action),
        checkpointId: output.checkpoint?.checkpointId ?? 0,
        output,
      };
      return { outcome, handedOff: action === 'handoff' && handOffs > 0 };
    } catch (error) {
      await logged.catch(() => {});
      const cause = error instanceof ExecutionError ? (error.cause as Error | undefined) : (error as Error);
      const errorName = cause?.name ?? 'Error';
      const outcome = {
        ...counted(),
        status: failedStatus(errorName),
        checkpointId: seenCheckpointId,
        error: errorName,
        cause: cause?.message ?? String(error),
      };
      return { outcome, handedOff: false };
    }
  }

  async function runCheckpoint(): Promise<CheckpointOutcome> {
    const first = await runExecution(entry, { source: 'local' } as JsonValue);
    if (!first.handedOff) return first.outcome;
    const { outcome } = await runExecution(handOffTarget(), {
      handedOffBy: first.outcome.execution,
    } as JsonValue);
    const before = first.outcome;
    return {
      ...outcome,
      invocations: [...before.invocations, ...outcome.invocations],
      events: before.events + outcome.events,
      transitions: before.transitions + outcome.transitions,
      executions: [...before.executions, ...outcome.executions],
      maxStateBytes: Math.max(before.maxStateBytes, outcome.maxStateBytes),
    };
  }

  return { coordinator, runCheckpoint };
}
