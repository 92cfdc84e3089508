/**
 * `CheckpointCoordinator`: the Step Functions checkpoint coordinator of one pipeline (C1–C7).
 *
 * - A Standard state machine whose definition is {@link buildCoordinatorDefinition} (the same pure function the
 *   local runner executes), deployed with `DefinitionBody.fromString` and `definitionSubstitutions` for the
 *   Lambda ARNs. Lambda tasks retry transient errors with backoff; failures before the decision Catch into Abort;
 *   after it they retry and, if still failing, end in `CheckpointCommitIncomplete` for the next execution to roll
 *   forward. Payloads are references (checkpoint id, attempt, ≤ 16 shard numbers), never file lists.
 * - With an Iceberg table (the `publish` prop) the definition has its Publish step, whose function (entry
 *   `functions/coordinator-publish.ts`) is granted only its ledger items, the manifests, the table's metadata
 *   prefix and its catalog calls; without it the stack is exactly the one without a table.
 * - One BundledFunction per step (entry `functions/coordinator.ts`, handler = the step's name), each with a role
 *   of its own granted only what its step does (checked against its calls in `test/coordinator/state-machine-iam.test.ts`):
 *   DynamoDB item actions on the table ARN with a `dynamodb:LeadingKeys` condition naming the item kinds the step
 *   touches (`shared/ledger/layout.ts`), S3 object actions on the prefixes it reads or writes
 *   (`shared/sink/layout.ts`, `work-objects.ts`) — only promote writes final data, only commit manifests, only
 *   prepare reads the processor-writable staged prefix (promote copies prepare's candidates) —,
 *   `s3:ListBucket` only with an `s3:prefix` condition, KMS only through S3 and DynamoDB.
 * - An EventBridge rule starts an execution every `interval` (default 60 s; EventBridge's floor is one minute),
 *   unless `scheduled` is false.
 * - `workflow: 'express'` (the default): the rule starts an Express state machine of the same definition, which
 *   bills a request and its duration instead of each transition, and hands an expired checkpoint, or the attempt
 *   after an abort, to the Standard one (`definition.ts`), which it alone may start. `standard`: the rule starts
 *   the Standard state machine, as before.
 */

import { Duration, Names, RemovalPolicy } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { DEFAULT_PIPELINE_ID, ENV_NAMES } from '../shared/config/settings.ts';
import {
  buildCoordinatorDefinition,
  COORDINATOR_STEPS,
  type CoordinatorStep,
  type CoordinatorTask,
  EXPRESS_TIMEOUT_SECONDS,
  functionArnSubstitution,
  PUBLISH_STEP,
  STANDARD_STATE_MACHINE_SUBSTITUTION,
  type Workflow,
} from '../shared/coordinator/definition.ts';
import { checkpointWorkPrefix } from '../shared/coordinator/work-objects.ts';
import { fenceKeys, fenceLeadingKeys } from '../shared/ledger/fences.ts';
import { keys } from '../shared/ledger/layout.ts';
import { finalPrefix, finalStreamPrefix, inProgressPrefix, manifestsPrefix } from '../shared/sink/layout.ts';
import { BundledFunction, type BundledFunctionProps } from './bundled-function.ts';
import { projectModule } from './package-paths.ts';
import { replayLeadingKeys } from './replay.ts';
import { grantKeyVia } from './security.ts';

export interface CheckpointCoordinatorProps {
  readonly table: dynamodb.ITable;
  readonly bucket: s3.IBucket;
  /** `EOS_*` settings (see `settingsToEnv`); `EOS_PIPELINE_ID` also scopes the IAM grants (default `orders`). */
  readonly environment: Record<string, string>;
  /** How often a checkpoint is taken. Default 60 s; whole minutes, at least one (EventBridge's rate floor). */
  readonly interval?: Duration;
  /**
   * Whether a rule starts a checkpoint every `interval`. The pipeline turns it off under the weaker delivery
   * guarantees, whose processors stage nothing: each execution would find nothing to commit and still be billed.
   * @default true
   */
  readonly scheduled?: boolean;
  /** Runtime, architecture, bundling, memory, logging, timeout… set by the stack; merged under each function. */
  readonly functionDefaults?: Partial<Omit<BundledFunctionProps, 'entry' | 'handler'>>;
  /** Retention of the state machine's execution log (default one month). */
  readonly logRetention?: logs.RetentionDays;
  /** What happens to the execution log group when the stack is deleted (default destroy). */
  readonly removalPolicy?: RemovalPolicy;
  /** The pipeline's customer-managed key, if any: encrypts the state machine's log group. */
  readonly encryptionKey?: kms.IKey;
  /** An Iceberg table to publish each committed checkpoint to: a `Publish` step and its function. Default none. */
  readonly publish?: CoordinatorPublishProps;
  /**
   * Which workflow the schedule starts. `express`: an Express state machine, about a fortieth of the Standard
   * one's bill at one checkpoint a minute, handing what may take longer than five minutes (an expired checkpoint,
   * the attempt after an abort) to the Standard state machine. `standard`: the Standard state machine only.
   * @default 'express'
   */
  readonly workflow?: Workflow;
}

/** The publish step's own part of the coordinator (`iceberg-table.ts` makes it from the `iceberg` prop). */
export interface CoordinatorPublishProps {
  /** `EOS_ICEBERG_*`: on the publish function only, over the pipeline's environment. */
  readonly environment: Record<string, string>;
  /** The table's metadata prefix in the sink bucket: the only prefix the publish step writes. */
  readonly metadataPrefix: string;
  /** What it may do to the catalog, on its table alone (none for a file catalog). */
  readonly catalogStatements: readonly iam.PolicyStatement[];
}

/**
 * A step's ledger access: actions on the items whose partition key matches one of the patterns. `keyRequired`
 * for PartiQL actions: `ForAllValues` matches a request that carries no key, so the grant also requires one.
 */
type LedgerGrant = readonly [actions: string[], leadingKeys: string[], options?: { keyRequired: true }];
type Actions = {
  readonly dynamodb: readonly LedgerGrant[];
  readonly objects: ReadonlyArray<readonly [prefix: string, actions: string[]]>;
};

const ENTRY = projectModule('../functions/coordinator.ts', import.meta.url);
/** The publish step's entry: the catalog clients it may load are bundled with it alone. */
const PUBLISH_ENTRY = projectModule('../functions/coordinator-publish.ts', import.meta.url);
const DEFAULT_TIMEOUT = Duration.minutes(5);

export class CheckpointCoordinator extends Construct {
  /** The Standard state machine: every checkpoint with `workflow: 'standard'`; else recoveries and retries. */
  readonly stateMachine: sfn.StateMachine;
  /** The Express state machine the schedule starts (`workflow: 'express'`, the default); none otherwise. */
  readonly expressStateMachine?: sfn.StateMachine;
  readonly functions: Readonly<Record<CoordinatorStep, BundledFunction>>;
  /** The publish step's function, with an Iceberg table (the `publish` prop). */
  readonly publishFunction?: BundledFunction;
  /** The rule that starts a checkpoint every interval; none when `scheduled` is false. */
  readonly schedule?: events.Rule;
  readonly pipelineId: string;

  constructor(scope: Construct, id: string, props: CheckpointCoordinatorProps) {
    super(scope, id);
    this.pipelineId = props.environment[ENV_NAMES.pipelineId] ?? DEFAULT_PIPELINE_ID;
    const interval = props.interval ?? Duration.seconds(60);
    const minutes = interval.toSeconds() / 60;
    if (!Number.isInteger(minutes) || minutes < 1) {
      throw new Error(`CheckpointCoordinator interval must be whole minutes, at least 1 (got ${interval})`);
    }
    const timeout = props.functionDefaults?.timeout ?? DEFAULT_TIMEOUT;

    const functions = {} as Record<CoordinatorStep, BundledFunction>;
    for (const step of COORDINATOR_STEPS) {
      functions[step] = this.stepFunction(step, timeout, props);
      this.grantStep(functions[step], this.stepActions(step), props);
    }
    this.functions = functions;
    if (props.publish) {
      this.publishFunction = this.stepFunction(PUBLISH_STEP, timeout, props, props.publish.environment);
      this.grantStep(this.publishFunction, this.publishActions(props.publish), props);
      for (const statement of props.publish.catalogStatements)
        this.publishFunction.addToRolePolicy(statement);
    }
    const tasks: Partial<Record<CoordinatorTask, BundledFunction>> = {
      ...functions,
      ...(this.publishFunction ? { [PUBLISH_STEP]: this.publishFunction } : {}),
    };

    const substitutions = Object.fromEntries(
      Object.entries(tasks).map(([step, fn]) => [
        functionArnSubstitution(step as CoordinatorTask),
        fn.functionArn,
      ]),
    );
    const definition = (workflow: Workflow) =>
      JSON.stringify(
        buildCoordinatorDefinition({
          taskTimeoutSeconds: timeout.toSeconds() + 60,
          executionTimeoutSeconds: workflow === 'express' ? EXPRESS_TIMEOUT_SECONDS : 3600,
          ...(props.publish ? { publish: true } : {}),
          workflow,
        }),
      );
    this.stateMachine = new sfn.StateMachine(this, 'StateMachine', {
      stateMachineType: sfn.StateMachineType.STANDARD,
      definitionBody: sfn.DefinitionBody.fromString(definition('standard')),
      definitionSubstitutions: substitutions,
      tracingEnabled: true,
      logs: {
        destination: this.logGroup('StateMachineLogs', 'coordinator', props),
        level: sfn.LogLevel.ALL,
        includeExecutionData: false,
      },
    });
    for (const fn of Object.values(tasks)) fn.grantInvoke(this.stateMachine);

    if ((props.workflow ?? 'express') === 'express') {
      this.expressStateMachine = new sfn.StateMachine(this, 'ExpressStateMachine', {
        stateMachineType: sfn.StateMachineType.EXPRESS,
        definitionBody: sfn.DefinitionBody.fromString(definition('express')),
        definitionSubstitutions: {
          ...substitutions,
          [STANDARD_STATE_MACHINE_SUBSTITUTION]: this.stateMachine.stateMachineArn,
        },
        tracingEnabled: true,
        // An Express workflow keeps no execution history: its log is the only record of its executions.
        logs: {
          destination: this.logGroup('ExpressStateMachineLogs', 'coordinator-express', props),
          level: sfn.LogLevel.ALL,
          includeExecutionData: false,
        },
      });
      for (const fn of Object.values(tasks)) fn.grantInvoke(this.expressStateMachine);
      this.stateMachine.grantStartExecution(this.expressStateMachine);
    }

    this.schedule =
      (props.scheduled ?? true)
        ? new events.Rule(this, 'Schedule', {
            description: `Starts a checkpoint of pipeline ${this.pipelineId}`,
            schedule: events.Schedule.rate(interval),
            targets: [new targets.SfnStateMachine(this.scheduledStateMachine)],
          })
        : undefined;
  }

  /** The state machine the schedule starts: the Express one, or the Standard one with `workflow: 'standard'`. */
  get scheduledStateMachine(): sfn.StateMachine {
    return this.expressStateMachine ?? this.stateMachine;
  }

  /** Every state machine of the coordinator, the Standard one first. */
  get stateMachines(): sfn.StateMachine[] {
    return this.expressStateMachine ? [this.stateMachine, this.expressStateMachine] : [this.stateMachine];
  }

  private logGroup(id: string, kind: string, props: CheckpointCoordinatorProps): logs.LogGroup {
    return new logs.LogGroup(this, id, {
      // Under /aws/vendedlogs/: otherwise every state machine log group is added to the account's one CloudWatch
      // Logs resource policy, whose size limit eventually fails deploys of many pipelines.
      logGroupName: `/aws/vendedlogs/states/eos-${this.pipelineId}-${kind}-${Names.uniqueId(this).slice(-8)}`,
      retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
      removalPolicy: props.removalPolicy ?? RemovalPolicy.DESTROY,
      encryptionKey: props.encryptionKey,
    });
  }

  /** One step's function: entry `functions/coordinator.ts` (publish: its own), handler = the step's name. */
  private stepFunction(
    step: CoordinatorTask,
    timeout: Duration,
    props: CheckpointCoordinatorProps,
    environment: Record<string, string> = {},
  ): BundledFunction {
    return new BundledFunction(this, `${step[0]!.toUpperCase()}${step.slice(1)}Function`, {
      timeout,
      architecture: lambda.Architecture.ARM_64,
      ...props.functionDefaults,
      entry: step === PUBLISH_STEP ? PUBLISH_ENTRY : ENTRY,
      handler: step,
      description: `Checkpoint coordinator step "${step}" of pipeline ${this.pipelineId}`,
      environment: { ...props.functionDefaults?.environment, ...props.environment, ...environment },
    });
  }

  /**
   * The publish step: the checkpoint records it requires COMMITTED and the table snapshot records and published
   * mark beside them (GetItem, and the conditional PutItems that record a snapshot and move the mark, all under
   * `<pl>#CHECKPOINT`, never a cut page); the manifests it reads the data files from; the table's metadata prefix,
   * read and written (manifests, and the position delete files of a replay switch; the catalog's own calls come
   * with {@link CoordinatorPublishProps.catalogStatements}); the output stream's final objects read only (the
   * lineage of a file a switch hides some rows of gives their positions; the table names the objects where they are
   * and never writes them), never a dead letter's.
   * It never touches staged data or the coordinator's work.
   */
  private publishActions(publish: CoordinatorPublishProps): Actions {
    const pl = this.pipelineId;
    return {
      dynamodb: [[['dynamodb:GetItem', 'dynamodb:PutItem'], [keys.checkpointPk(pl)]]],
      objects: [
        [manifestsPrefix(pl), ['s3:GetObject']],
        [finalStreamPrefix(pl, 'output'), ['s3:GetObject']],
        [publish.metadataPrefix, ['s3:GetObject', 's3:PutObject']],
      ],
    };
  }

  /**
   * What each step does to the ledger and the bucket, and nothing more. Item kinds: the checkpoint head, records
   * and cut pages (`<pl>#CHECKPOINT`, `<pl>#CHECKPOINT#…`), read by every step and written by the steps that move
   * a checkpoint; the fences (`<pl>#FENCE` and its shards `<pl>#FENCE#*`), read by begin for the cut; staged-file entries
   * (`<pl>#STAGED#…`, and inline in the fence items: `inline-entries.ts`), read by prepare (and by commit, for the
   * `CommitLatency` metric) and removed by cleanup (an inline entry by an UpdateItem of its fence);
   * the replay plans (`<pl>#REPLAY`, `replay.ts`), read by begin and switched by commit. No step touches claims
   * or keyed state.
   */
  private stepActions(step: CoordinatorStep): Actions {
    const pl = this.pipelineId;
    const staged = inProgressPrefix(pl);
    const work = checkpointWorkPrefix(pl);
    const final = finalPrefix(pl);
    const manifests = manifestsPrefix(pl);
    const checkpoint = [keys.checkpointPk(pl), `${keys.checkpointPk(pl)}#*`];
    const fences = fenceLeadingKeys(pl);
    // Inline staged entries lie only in the sharded fences (`inline-entries.ts`): cleanup removes them there.
    const shardedFences = [`${fenceKeys.legacyPk(pl)}#*`];
    const stagedEntries = [`${pl}#STAGED#*`];
    const read = ['dynamodb:GetItem', 'dynamodb:Query'];
    const write = ['dynamodb:UpdateItem'];
    const replay = replayLeadingKeys(pl);
    switch (step) {
      case 'begin':
        // The head is allocated with a conditional Put (C1); the cut's pages are Puts too, and the pages of a
        // cut that lost the race are deleted. Every begin lists the replay plans for a requested switch: with or
        // without a replay mapping deployed (a plan is written before it, and outlives it).
        return {
          dynamodb: [
            [[...read, ...write, 'dynamodb:PutItem', 'dynamodb:DeleteItem'], checkpoint],
            [read, fences],
            [read, replay],
          ],
          objects: [],
        };
      case 'prepare':
        // Each covered staged object is read once and verified; the final objects' bytes are written once each as
        // candidates under the attempt's folder, beside the plan (a retried prepare reads what it wrote).
        return {
          dynamodb: [
            [[...read, ...write], checkpoint],
            [read, stagedEntries],
            [['dynamodb:BatchGetItem'], fences],
          ],
          objects: [
            [staged, ['s3:GetObject']],
            [work, ['s3:GetObject', 's3:PutObject']],
          ],
        };
      case 'decide':
        return { dynamodb: [[[...read, ...write], checkpoint]], objects: [] };
      case 'promote':
        return {
          // UpdateItem: the lease renewal on the head.
          dynamodb: [[[...read, ...write], checkpoint]],
          // No access to the staged prefix: promote reads the plan and copies prepare's candidates (CopyObject is
          // s3:GetObject on the source, s3:PutObject on the final object) from the work prefix.
          objects: [
            [work, ['s3:GetObject', 's3:PutObject']],
            [final, ['s3:GetObject', 's3:PutObject']],
          ],
        };
      case 'commit':
        return {
          // Query on staged entries, GetItem on fences (inline entries): the first covered entry of each partition,
          // for CommitLatency when a plan does not name it (read only).
          // A checkpoint that switches to a replay's generation reads its plan and marks it switched (GetItem,
          // a conditional UpdateItem); commit never creates or deletes a plan.
          dynamodb: [
            [[...read, ...write], checkpoint],
            [['dynamodb:Query'], stagedEntries],
            [['dynamodb:GetItem'], fences],
            [['dynamodb:GetItem', 'dynamodb:UpdateItem'], replay],
          ],
          objects: [
            [work, ['s3:GetObject']],
            [manifests, ['s3:GetObject', 's3:PutObject']],
          ],
        };
      case 'cleanup':
      case 'abort':
        // PutItem: the orphan sweep's resume mark; DeleteItem: cut pages no checkpoint needs any more. Cleanup
        // reads the shard's voted plan (the staged files it names are what it deletes); abort reads no plan.
        // Staged entries go in batches of conditional PartiQL deletes (one write unit each, not a transaction's
        // two), by transaction where a batch leaves one undecided; inline ones by an UpdateItem that removes their
        // attributes from the fence item (GetItem: the fence's inline entries, read with it).
        return {
          dynamodb: [
            [[...read, ...write, 'dynamodb:PutItem', 'dynamodb:DeleteItem'], checkpoint],
            [[...read, 'dynamodb:DeleteItem'], stagedEntries],
            [['dynamodb:GetItem', 'dynamodb:BatchGetItem'], fences],
            [['dynamodb:UpdateItem'], shardedFences],
            [['dynamodb:PartiQLDelete'], stagedEntries, { keyRequired: true }],
          ],
          objects: [
            [staged, ['s3:GetObject', 's3:DeleteObject']],
            [work, step === 'cleanup' ? ['s3:GetObject', 's3:DeleteObject'] : ['s3:DeleteObject']],
          ],
        };
    }
  }

  private grantStep(fn: BundledFunction, actions: Actions, props: CheckpointCoordinatorProps): void {
    for (const [dynamodbActions, leadingKeys, options] of actions.dynamodb) {
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          actions: dynamodbActions,
          resources: [props.table.tableArn],
          conditions: {
            'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': leadingKeys },
            ...(options?.keyRequired ? { Null: { 'dynamodb:LeadingKeys': 'false' } } : {}),
          },
        }),
      );
    }
    if (props.table.encryptionKey)
      grantKeyVia(props.table.encryptionKey, fn, ['dynamodb'], 'encrypt-decrypt');
    if (actions.objects.length === 0) return;
    for (const [prefix, objectActions] of actions.objects) {
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          actions: objectActions,
          resources: [props.bucket.arnForObjects(`${prefix}*`)],
        }),
      );
    }
    // Without ListBucket a missing object reads as 403, not 404; scoped to the prefixes this step touches.
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['s3:ListBucket'],
        resources: [props.bucket.bucketArn],
        conditions: { StringLike: { 's3:prefix': actions.objects.map(([prefix]) => `${prefix}*`) } },
      }),
    );
    if (props.bucket.encryptionKey) grantKeyVia(props.bucket.encryptionKey, fn, ['s3'], 'encrypt-decrypt');
  }
}
