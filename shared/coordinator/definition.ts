/**
 * The checkpoint coordinator's state machine, as Amazon States Language, built by one pure function.
 *
 * The CDK construct (`infra/checkpoint-coordinator.ts`) deploys exactly this definition through
 * `DefinitionBody.fromString` with `definitionSubstitutions` for the Lambda ARNs, and the local runner
 * (`local/coordinator-runner.ts`) runs it in aws-local-stepfunctions; the state machine tests take it back from
 * the synthesized template, so the definition that deploys is the one tested.
 *
 * ```
 *  Init ─▶ Begin ─▶ Route ─┬─ checkpoint ─▶ Prepare (Map) ─▶ Decide ─▶ Promote (Map) ─▶ Commit ─▶ Cleanup (Map) ─▶ Committed
 *                          ├─ commit (recovery: roll forward) ─────────▶ Promote
 *                          ├─ busy  ─▶ AnotherCheckpointInFlight            ▲        after the decision: retry;
 *                          └─ empty ─▶ NothingToCommit                      │        still failing ─▶ CommitIncomplete
 *                                                                           │ decided
 *  Begin / Prepare / Decide failing (after retries) ─▶ Abort ─▶ AfterAbort ─┴─ else ─▶ Aborted (Fail)
 *                                                        └─ Abort failing ─▶ AbortFailed (Fail)
 * ```
 *
 * With an Iceberg table to publish to ({@link DefinitionOptions.publish}), a `Publish` task runs between Commit and
 * Cleanup: the committed checkpoint, and any earlier one not yet published, appended to the table. Its failure
 * never undoes the commit: it goes on to Cleanup, and the next checkpoint's publish catches up. An idle pipeline
 * has no next checkpoint, so Begin is told the state machine publishes and, with nothing to commit, answers
 * `publish` when the published mark is behind the last committed checkpoint; Route sends that to `CatchUpPublish`,
 * which publishes it and ends at NothingToCommit whatever it answers:
 *
 * ```
 *  Route ─ publish (nothing to commit, the table behind) ─▶ CatchUpPublish ─▶ NothingToCommit
 * ```
 *
 * Without a table the definition has none of this, byte for byte what it was.
 *
 * Two workflows run this definition ({@link DefinitionOptions.workflow}). A Standard workflow bills every state
 * transition (about fifteen a checkpoint); an Express one bills a request and its duration, a few hundredths of
 * that, but stops at five minutes and may run an execution more than once. So the scheduled checkpoint runs
 * Express, and whatever may need longer is handed to a Standard workflow of the same definition: begin, told the
 * workflow hands off, answers `handoff` instead of recovering an expired checkpoint, allocating the attempt after
 * an abort, or allocating the checkpoint after a long one, having changed nothing, and the Express execution starts
 * the Standard one and ends:
 *
 * ```
 *  Route ─ handoff (an expired lease, the last attempt aborted, a long last one) ─▶ HandOff (start the Standard) ─▶ HandedOff
 * ```
 *
 * An Express execution cut off at five minutes is an execution that died: its lease expires and the next one
 * hands the checkpoint to the Standard workflow, which recovers it (C4) with a step's own timeout as its bound. An
 * Express execution whose begin fails ends at `BeginFailed` without aborting: a second run of the same execution
 * may own the checkpoint, and the lease decides instead.
 *
 * Step Functions limits: the state data carries references only — the checkpoint id, the attempt and a list of
 * at most {@link MAX_SHARDS} shard numbers; each shard's Lambda reads its partitions from the checkpoint record
 * and its files from the ledger (prepare) or from the plan object prepare wrote (promote). So the payloads stay
 * a few hundred bytes and the history a few hundred events, however many files a checkpoint covers.
 */

/** The Lambda-backed steps, one handler each in `functions/coordinator.ts`. */
export const COORDINATOR_STEPS = [
  'begin',
  'prepare',
  'decide',
  'promote',
  'commit',
  'cleanup',
  'abort',
] as const;
export type CoordinatorStep = (typeof COORDINATOR_STEPS)[number];

/** The step of a definition that publishes to an Iceberg table; only such a definition has it. */
export const PUBLISH_STEP = 'publish';
/** Every Lambda-backed step a definition may have. */
export type CoordinatorTask = CoordinatorStep | typeof PUBLISH_STEP;
/** The Task state of an Express workflow that starts the Standard workflow (begin answered `handoff`). */
export const HAND_OFF_STATE_NAME = 'HandOff';
/** The `definitionSubstitutions` key for the Standard workflow an Express one hands off to. */
export const STANDARD_STATE_MACHINE_SUBSTITUTION = 'StandardStateMachineArn';
/** An Express workflow's longest execution: Step Functions stops it at five minutes. */
export const EXPRESS_TIMEOUT_SECONDS = 300;

export const WORKFLOWS = ['express', 'standard'] as const;
/** The Step Functions workflow type a definition is built for. */
export type Workflow = (typeof WORKFLOWS)[number];

/** The Task state of the publish step. */
export const PUBLISH_STATE_NAME = 'Publish';
/** The Task state of the publish step on an idle pipeline whose table is behind (begin answered `publish`). */
export const CATCH_UP_PUBLISH_STATE_NAME = 'CatchUpPublish';

/** Most shards a checkpoint is split into: bounds every Map's fan-out and the state data. */
export const MAX_SHARDS = 16;
/** Map iterations in flight at once. */
export const MAP_MAX_CONCURRENCY = 8;

/** The `definitionSubstitutions` key that carries each step's Lambda ARN. */
export function functionArnSubstitution(step: CoordinatorTask): string {
  return `${step[0]!.toUpperCase()}${step.slice(1)}FunctionArn`;
}

/** The Task state that invokes each step (inside a Map's processor for the shard steps). */
export const STATE_NAMES = {
  begin: 'Begin',
  prepare: 'PrepareShard',
  decide: 'Decide',
  promote: 'PromoteShard',
  commit: 'Commit',
  cleanup: 'CleanupShard',
  abort: 'Abort',
} as const satisfies Record<CoordinatorStep, string>;

/** Errors worth retrying in place: the Lambda service's own, throttling and network trouble, injected crashes. */
export const TRANSIENT_ERRORS = [
  'Lambda.ServiceException',
  'Lambda.AWSLambdaException',
  'Lambda.SdkClientException',
  'Lambda.TooManyRequestsException',
  'Lambda.Unknown',
  'States.Timeout',
  'TransientAwsError',
  'InjectedCrashError',
] as const;

export interface DefinitionOptions {
  /** Seconds per Lambda task before Step Functions gives up on it (keep above the function's timeout). */
  readonly taskTimeoutSeconds?: number;
  /** The whole execution's limit; an execution cut off after the decision is rolled forward by the next one. */
  readonly executionTimeoutSeconds?: number;
  /** A `Publish` task between Commit and Cleanup (an Iceberg table is configured). Default: none. */
  readonly publish?: boolean;
  /**
   * `express`: the definition an Express workflow runs, which hands recoveries and retries after an abort to the
   * Standard workflow named by `${StandardStateMachineArn}` (see the module comment); its execution timeout is
   * {@link EXPRESS_TIMEOUT_SECONDS}. Default `standard`: the definition a Standard workflow runs.
   */
  readonly workflow?: Workflow;
}

type Json = Record<string, unknown>;

/** Retries for steps before the decision: transient failures only; the rest Catch into Abort. */
const RETRY_BEFORE_DECISION: Json[] = [
  {
    ErrorEquals: [...TRANSIENT_ERRORS],
    IntervalSeconds: 1,
    BackoffRate: 2,
    MaxAttempts: 3,
    MaxDelaySeconds: 30,
  },
];

/** After the decision the checkpoint only rolls forward: retry everything, longer. */
const RETRY_AFTER_DECISION: Json[] = [
  { ErrorEquals: ['States.ALL'], IntervalSeconds: 2, BackoffRate: 2, MaxAttempts: 6, MaxDelaySeconds: 60 },
];

/**
 * Publish retries what may pass (transient failures, injected crashes, other writers moving the table); a table
 * rolled back or a broken record fails the same way each time and is left to the catch.
 */
const RETRY_PUBLISH: Json[] = [
  {
    ErrorEquals: [...TRANSIENT_ERRORS, 'IcebergCommitConflictError'],
    IntervalSeconds: 2,
    BackoffRate: 2,
    MaxAttempts: 6,
    MaxDelaySeconds: 60,
  },
];

const CATCH_TO_ABORT: Json[] = [{ ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: 'Abort' }];
/**
 * An Express execution whose begin failed does not abort: abort would take the checkpoint this execution id owns,
 * which a second run of the same execution may be preparing. Its lease lapses instead, and the Standard workflow
 * recovers it.
 */
const CATCH_TO_BEGIN_FAILED: Json[] = [
  { ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: 'BeginFailed' },
];
const CATCH_TO_INCOMPLETE: Json[] = [
  { ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: 'CommitIncomplete' },
];

/** A Lambda task; `payload` is a Parameters template, or `'$'` to pass the state's input as it is. */
function lambdaTask(step: CoordinatorTask, payload: Json | '$', timeoutSeconds: number, rest: Json): Json {
  const body = payload === '$' ? { 'Payload.$': '$' } : { Payload: payload };
  return {
    Type: 'Task',
    Resource: 'arn:aws:states:::lambda:invoke',
    Parameters: { FunctionName: `\${${functionArnSubstitution(step)}}`, ...body },
    TimeoutSeconds: timeoutSeconds,
    ...rest,
  };
}

const CHECKPOINT_REF = {
  'execution.$': '$.execution',
  'checkpointId.$': '$.checkpoint.checkpointId',
  'attempt.$': '$.checkpoint.attempt',
};

function shardMap(step: 'prepare' | 'promote' | 'cleanup', timeoutSeconds: number, retry: Json[]): Json {
  return {
    Type: 'Map',
    ItemsPath: '$.checkpoint.shards',
    MaxConcurrency: MAP_MAX_CONCURRENCY,
    ItemSelector: {
      'execution.$': '$.execution',
      'checkpointId.$': '$.checkpoint.checkpointId',
      'attempt.$': '$.checkpoint.attempt',
      'shard.$': '$$.Map.Item.Value',
    },
    ItemProcessor: {
      ProcessorConfig: { Mode: 'INLINE' },
      StartAt: STATE_NAMES[step],
      States: {
        [STATE_NAMES[step]]: lambdaTask(step, '$', timeoutSeconds, {
          ResultSelector: { 'shard.$': '$.Payload.shard' },
          Retry: retry,
          End: true,
        }),
      },
    },
    ResultPath: null,
  };
}

/** Abort and the ends of the failed paths: an abort refused after the decision rolls forward instead. */
function abortStates(task: number): Json {
  return {
    Abort: lambdaTask('abort', { ...CHECKPOINT_REF, 'error.$': '$.error' }, task, {
      ResultSelector: { 'outcome.$': '$.Payload.outcome', 'reason.$': '$.Payload.reason' },
      ResultPath: '$.abort',
      Retry: RETRY_BEFORE_DECISION,
      Catch: [{ ErrorEquals: ['States.ALL'], ResultPath: '$.abortError', Next: 'AbortFailed' }],
      Next: 'AfterAbort',
    }),
    // Abort refuses a checkpoint already COMMITTING (a decide that wrote, then failed): roll it forward.
    AfterAbort: {
      Type: 'Choice',
      Choices: [{ Variable: '$.abort.outcome', StringEquals: 'decided', Next: 'Promote' }],
      Default: 'Aborted',
    },
    Aborted: { Type: 'Fail', Error: 'CheckpointAborted', CausePath: '$.abort.reason' },
    AbortFailed: {
      Type: 'Fail',
      Error: 'CheckpointAbortFailed',
      Cause: 'the abort step failed; the next execution recovers the checkpoint once its lease expires',
    },
    CommitIncomplete: {
      Type: 'Fail',
      Error: 'CheckpointCommitIncomplete',
      Cause: 'the checkpoint is COMMITTING; the next execution rolls it forward once its lease expires',
    },
  };
}

/** A publish task going on to `next` whatever it answers (see the module comment). */
function publishTask(task: number, next: string): Json {
  return lambdaTask(PUBLISH_STEP, CHECKPOINT_REF, task, {
    ResultPath: null,
    Retry: RETRY_PUBLISH,
    Catch: [{ ErrorEquals: ['States.ALL'], ResultPath: '$.publishError', Next: next }],
    Next: next,
  });
}

/** The publish tasks: after Commit, and on an idle pipeline whose table is behind. */
function publishStates(task: number): Json {
  return {
    [PUBLISH_STATE_NAME]: publishTask(task, 'Cleanup'),
    [CATCH_UP_PUBLISH_STATE_NAME]: publishTask(task, 'NothingToCommit'),
  };
}

/**
 * The states only an Express definition has. `HandOff` starts the Standard workflow and ends: begin changed
 * nothing, so the Standard execution begins afresh; its input names this execution, for an operator following a
 * checkpoint from one workflow to the other. `BeginFailed` ends an execution whose begin failed, without an abort
 * ({@link CATCH_TO_BEGIN_FAILED}).
 */
function expressStates(): Json {
  return {
    BeginFailed: {
      Type: 'Fail',
      Error: 'CheckpointBeginFailed',
      Cause:
        'begin failed; a checkpoint it allocated is recovered by the Standard workflow once its lease expires',
    },
    [HAND_OFF_STATE_NAME]: {
      Type: 'Task',
      Resource: 'arn:aws:states:::states:startExecution',
      Parameters: {
        StateMachineArn: `\${${STANDARD_STATE_MACHINE_SUBSTITUTION}}`,
        Input: { 'handedOffBy.$': '$.execution' },
      },
      ResultPath: null,
      Retry: [
        {
          ErrorEquals: ['States.ALL'],
          IntervalSeconds: 1,
          BackoffRate: 2,
          MaxAttempts: 3,
          MaxDelaySeconds: 10,
        },
      ],
      Next: 'HandedOff',
    },
    HandedOff: { Type: 'Succeed' },
  };
}

/** Route's choices; a state machine that publishes also routes begin's `publish`, an Express one `handoff`. */
function routeChoices(publish: boolean, express: boolean): Json[] {
  return [
    ...(express
      ? [{ Variable: '$.checkpoint.action', StringEquals: 'handoff', Next: HAND_OFF_STATE_NAME }]
      : []),
    { Variable: '$.checkpoint.action', StringEquals: 'checkpoint', Next: 'Prepare' },
    { Variable: '$.checkpoint.action', StringEquals: 'commit', Next: 'Promote' },
    { Variable: '$.checkpoint.action', StringEquals: 'empty', Next: 'NothingToCommit' },
    ...(publish
      ? [{ Variable: '$.checkpoint.action', StringEquals: 'publish', Next: CATCH_UP_PUBLISH_STATE_NAME }]
      : []),
  ];
}

/**
 * The coordinator's ASL definition. Lambda ARNs appear as `${BeginFunctionArn}`, `${PrepareFunctionArn}`, ...
 * (see {@link functionArnSubstitution}) for `definitionSubstitutions` to fill.
 */
export function buildCoordinatorDefinition(options: DefinitionOptions = {}): Json {
  const task = options.taskTimeoutSeconds ?? 900;
  const publish = options.publish === true;
  const express = options.workflow === 'express';
  const beginPayload = {
    'execution.$': '$.execution',
    ...(publish ? { publish } : {}),
    ...(express ? { handOff: true } : {}),
  };
  return {
    Comment:
      'Checkpoint coordinator: begin, prepare, decide, promote, commit, cleanup; abort before the decision',
    TimeoutSeconds: express
      ? Math.min(options.executionTimeoutSeconds ?? EXPRESS_TIMEOUT_SECONDS, EXPRESS_TIMEOUT_SECONDS)
      : (options.executionTimeoutSeconds ?? 3600),
    StartAt: 'Init',
    States: {
      // Seeds the state data so that every later path (Abort included) finds the fields it references.
      Init: {
        Type: 'Pass',
        Parameters: {
          'execution.$': '$$.Execution.Id',
          checkpoint: { action: 'none', checkpointId: 0, attempt: 0, shards: [] },
        },
        Next: 'Begin',
      },
      Begin: lambdaTask('begin', beginPayload, task, {
        ResultSelector: {
          'action.$': '$.Payload.action',
          'checkpointId.$': '$.Payload.checkpointId',
          'attempt.$': '$.Payload.attempt',
          'shards.$': '$.Payload.shards',
        },
        ResultPath: '$.checkpoint',
        Retry: RETRY_BEFORE_DECISION,
        Catch: express ? CATCH_TO_BEGIN_FAILED : CATCH_TO_ABORT,
        Next: 'Route',
      }),
      Route: {
        Type: 'Choice',
        Choices: routeChoices(publish, express),
        Default: 'AnotherCheckpointInFlight',
      },
      Prepare: { ...shardMap('prepare', task, RETRY_BEFORE_DECISION), Catch: CATCH_TO_ABORT, Next: 'Decide' },
      Decide: lambdaTask('decide', CHECKPOINT_REF, task, {
        ResultPath: null,
        Retry: RETRY_BEFORE_DECISION,
        Catch: CATCH_TO_ABORT,
        Next: 'Promote',
      }),
      Promote: {
        ...shardMap('promote', task, RETRY_AFTER_DECISION),
        Catch: CATCH_TO_INCOMPLETE,
        Next: 'Commit',
      },
      Commit: lambdaTask('commit', CHECKPOINT_REF, task, {
        ResultPath: null,
        Retry: RETRY_AFTER_DECISION,
        Catch: CATCH_TO_INCOMPLETE,
        Next: publish ? PUBLISH_STATE_NAME : 'Cleanup',
      }),
      ...(publish ? publishStates(task) : {}),
      ...(express ? expressStates() : {}),
      // Cleanup failures never undo a commit: what is left is cleaned by the next checkpoint.
      Cleanup: {
        ...shardMap('cleanup', task, RETRY_AFTER_DECISION),
        Catch: [{ ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: 'Committed' }],
        Next: 'Committed',
      },
      Committed: { Type: 'Succeed' },
      ...abortStates(task),
      NothingToCommit: { Type: 'Succeed' },
      AnotherCheckpointInFlight: { Type: 'Succeed' },
    },
  };
}
