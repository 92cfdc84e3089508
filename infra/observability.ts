/**
 * Alarms and a dashboard for one pipeline. Every alarm notifies the alarm topic (and its recovery too).
 *
 * | alarm                  | fires when                                                                      |
 * |------------------------|---------------------------------------------------------------------------------|
 * | CheckpointFailed       | a coordinator execution failed, timed out or was aborted (a protocol abort ends  |
 * |                        | in a Fail state, so it counts)                                                   |
 * | NoCommit               | the oldest uncommitted staged file is older than N checkpoint intervals, or the |
 * |                        | monitor stopped reporting (missing data breaches)                                |
 * | RecordDeadLettered     | any record went to the dead-letter stream                                        |
 * | ProcessorErrors        | any processor invocation failed (the mapping retries it; repeated errors stall  |
 * |                        | the partition), less those that failed an unproven redelivery on purpose        |
 * | OffsetsWentBackwards   | a batch started below its partition's fence (recreated topic, reset consumer     |
 * |                        | group): that partition is stopped until an operator resumes it (L2)             |
 * | FenceJump              | a batch started further above its fence than `maxFenceJump` (a gap, or an       |
 * |                        | invocation with forged offsets)                                                  |
 * | IdempotencyKeyConflict | a record reused another record's idempotency key with a different payload        |
 * | EventRejected          | an event from another source or topic, or malformed, was refused before effects |
 * | DuplicateKeyBurst      | more key duplicates than `duplicateBurstThreshold` in 5 minutes (a producer      |
 * |                        | replaying, or keys being suppressed on purpose)                                  |
 * | OffsetLagHigh          | the event source mapping's `OffsetLag` (AWS/Lambda: records in the topic the     |
 * |                        | consumer group has not processed) stayed at `offsetLagThreshold` or above for 15 |
 * |                        | minutes: the processor does not keep up, or a partition is stalled              |
 * | ReplayG<N>Processor-   | with a replay deployed (the `replay` prop): any replay processor invocation      |
 * | Errors                 | failed (its mapping retries it; the live output is not affected)                 |
 * | PublishBehind          | with an Iceberg table: N committed checkpoints or more are not in the table yet  |
 * |                        | (each execution goes on past a failed publish, so only the monitor sees it)      |
 *
 * Each alarm's description says what it means and the first thing to do (the README copies them).
 *
 * Besides the alarms: a Contributor Insights rule over the processor's log group sums redelivered records dropped
 * by topic and partition (the processor logs one line per partition with drops), so a burst on one partition shows
 * on the dashboard without a custom metric per partition; and the dashboard (`dashboard.ts`): graphs of commit
 * latency, the ledger ages, uncommitted records and the offset lag.
 */
import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as sns from 'aws-cdk-lib/aws-sns';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import {
  AWS_LAMBDA_METRIC,
  METRIC,
  METRICS_NAMESPACE,
  type MetricName,
  metricDimensionsMap,
  REDELIVERY_DROPS_LOG,
} from '../shared/observability/names.ts';
import { buildPipelineDashboard } from './dashboard.ts';

export interface PipelineObservabilityProps {
  readonly pipelineId: string;
  readonly processor: lambda.IFunction;
  /** The Standard state machine: every checkpoint, or (with `expressStateMachine`) recoveries and retries. */
  readonly stateMachine: sfn.IStateMachine;
  /** The Express state machine the schedule starts, when the coordinator has one. */
  readonly expressStateMachine?: sfn.IStateMachine;
  readonly monitor: lambda.IFunction;
  readonly checkpointInterval: Duration;
  readonly noCommitIntervals: number;
  readonly alarmTopic: sns.ITopic;
  /** Key duplicates in 5 minutes at which DuplicateKeyBurst fires (default 100). */
  readonly duplicateBurstThreshold?: number;
  /**
   * The mapping's `OffsetLag` (records, at topic level) at which OffsetLagHigh fires when it lasts 15 minutes
   * (default 100,000). Set it to a few minutes of the topic's peak produce rate: a healthy pipeline drains a
   * burst within that, a stalled partition or an undersized processor does not.
   */
  readonly offsetLagThreshold?: number;
  /**
   * The processor's log group: the Contributor Insights rule of redelivery drops per partition reads it. Without
   * it, no rule (and no dashboard widget of it).
   */
  readonly processorLogGroup?: logs.ILogGroup;
  /** The replay processor of a replay into a new generation, if one is deployed: its own Errors alarm. */
  readonly replayProcessor?: { readonly function: lambda.IFunction; readonly generation: number };
  /**
   * The pipeline publishes to an Iceberg table (the monitor reports `UnpublishedCheckpoints`): the PublishBehind
   * alarm. @default false
   */
  readonly publishes?: boolean;
}

/** The default of {@link PipelineObservabilityProps.duplicateBurstThreshold}. */
export const DEFAULT_DUPLICATE_BURST_THRESHOLD = 100;
/** The default of {@link PipelineObservabilityProps.offsetLagThreshold}. */
export const DEFAULT_OFFSET_LAG_THRESHOLD = 100_000;

export class PipelineObservability extends Construct {
  readonly alarms: {
    readonly checkpointFailed: cloudwatch.Alarm;
    readonly noCommit: cloudwatch.Alarm;
    readonly deadLettered: cloudwatch.Alarm;
    readonly processorErrors: cloudwatch.Alarm;
    readonly offsetsWentBackwards: cloudwatch.Alarm;
    readonly fenceJump: cloudwatch.Alarm;
    readonly keyConflict: cloudwatch.Alarm;
    readonly eventRejected: cloudwatch.Alarm;
    readonly duplicateKeyBurst: cloudwatch.Alarm;
    readonly offsetLagHigh: cloudwatch.Alarm;
  };
  /** Any replay processor invocation failed (with `replayProcessor` only). */
  readonly replayProcessorErrors?: cloudwatch.Alarm;
  /** The table is `noCommitIntervals` committed checkpoints behind or more (with `publishes` only). */
  readonly publishBehind?: cloudwatch.Alarm;
  /** Redelivered records dropped, summed per topic and partition (absent without `processorLogGroup`). */
  readonly redeliveryDropsRule?: cloudwatch.CfnInsightRule;
  /** Every alarm's name (known at synth: the alarm topic's policy names them one by one). */
  readonly alarmNames: string[] = [];
  readonly dashboard: cloudwatch.Dashboard;

  constructor(
    scope: Construct,
    id: string,
    private readonly props: PipelineObservabilityProps,
  ) {
    super(scope, id);
    const pl = props.pipelineId;
    const machines = [props.stateMachine, ...(props.expressStateMachine ? [props.expressStateMachine] : [])];
    // The executions of either workflow that failed, timed out (an Express one cut off at five minutes) or aborted.
    const usingMetrics: Record<string, cloudwatch.IMetric> = {};
    machines.forEach((machine, i) => {
      usingMetrics[`failed${i}`] = machine.metricFailed({ statistic: 'Sum' });
      usingMetrics[`timedOut${i}`] = machine.metricTimedOut({ statistic: 'Sum' });
      usingMetrics[`aborted${i}`] = machine.metricAborted({ statistic: 'Sum' });
    });
    const failedExecutions = new cloudwatch.MathExpression({
      label: 'failed, timed out or aborted executions',
      expression: Object.keys(usingMetrics)
        .map((name) => `FILL(${name}, 0)`)
        .join(' + '),
      usingMetrics,
      period: Duration.minutes(5),
    });
    this.alarms = {
      ...this.progressAlarms(pl, failedExecutions),
      ...this.securityAlarms(pl),
      offsetLagHigh: this.offsetLagAlarm(pl),
    };
    const replay = props.replayProcessor;
    if (replay) {
      // The generation is in the name, as in the function's id: a new generation's alarm is a new alarm.
      this.replayProcessorErrors = this.alarm(
        `ReplayG${replay.generation}ProcessorErrors`,
        replay.function.metricErrors({ statistic: 'Sum', period: Duration.minutes(5) }),
        {
          alarmDescription: `Pipeline ${pl}: replay processor invocations of generation ${replay.generation} failed; its mapping retries the batch, and persistent errors stall that partition of the replay (the live output is not affected). First: read the replay processor's logs.`,
          threshold: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        },
      );
    }
    if (props.publishes) this.publishBehind = this.publishBehindAlarm(pl);
    if (props.processorLogGroup)
      this.redeliveryDropsRule = this.redeliveryDropsInsightRule(props.processorLogGroup);
    this.dashboard = buildPipelineDashboard(this, {
      ...props,
      offsetLagThreshold: props.offsetLagThreshold ?? DEFAULT_OFFSET_LAG_THRESHOLD,
      alarms: [
        ...Object.values(this.alarms),
        ...(this.replayProcessorErrors ? [this.replayProcessorErrors] : []),
        ...(this.publishBehind ? [this.publishBehind] : []),
      ],
      failedExecutions,
      redeliveryDropsRuleName: this.redeliveryDropsRule?.ruleName,
      metric: (name, statistic, period) => this.pipelineMetric(name, statistic, period),
    });
  }

  /** The alarms of a pipeline that stopped making progress: checkpoints, commits, dead letters, the processor. */
  private progressAlarms(pl: string, failedExecutions: cloudwatch.IMetric) {
    const { props } = this;
    const interval = props.checkpointInterval;
    return {
      checkpointFailed: this.alarm('CheckpointFailed', failedExecutions, {
        alarmDescription: `Pipeline ${pl}: a checkpoint execution failed or aborted; staged data waits for the next one (C6). Run "eos status".`,
        threshold: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      noCommit: this.alarm(
        'NoCommit',
        this.pipelineMetric(METRIC.oldestUncommittedStagedAge, 'Maximum', interval),
        {
          alarmDescription: `Pipeline ${pl}: staged data has waited more than ${props.noCommitIntervals} checkpoint intervals without a commit, or the monitor stopped reporting.`,
          threshold: props.noCommitIntervals * interval.toSeconds(),
          comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
          treatMissingData: cloudwatch.TreatMissingData.BREACHING,
          evaluationPeriods: 2,
        },
      ),
      deadLettered: this.alarm(
        'RecordDeadLettered',
        this.pipelineMetric(METRIC.deadLettered, 'Sum', Duration.minutes(5)),
        {
          alarmDescription: `Pipeline ${pl}: records went to the dead-letter stream (P6): a transform failed deterministically.`,
          threshold: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        },
      ),
      processorErrors: this.alarm(
        'ProcessorErrors',
        // A batch below a moving fence that nothing proved a redelivery fails on purpose (a zombie's stale batch:
        // its answer is discarded; else the mapping's retry judges it): not an error to page anyone for.
        new cloudwatch.MathExpression({
          label: 'failed invocations, less unproven redeliveries',
          expression: 'MAX([FILL(errors, 0) - FILL(unproven, 0), 0 * FILL(errors, 0)])',
          usingMetrics: {
            errors: props.processor.metricErrors({ statistic: 'Sum', period: Duration.minutes(5) }),
            unproven: this.pipelineMetric(METRIC.unprovenRedeliveries, 'Sum', Duration.minutes(5)),
          },
          period: Duration.minutes(5),
        }),
        {
          alarmDescription: `Pipeline ${pl}: processor invocations failed; the mapping retries the batch, and persistent errors stall the partition.`,
          threshold: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        },
      ),
    };
  }

  /**
   * A publish that fails is caught and the next checkpoint's publish catches up, so no execution fails: the
   * monitor's count of committed checkpoints missing from the table is the only sign of one that always fails.
   */
  private publishBehindAlarm(pl: string): cloudwatch.Alarm {
    const { checkpointInterval, noCommitIntervals } = this.props;
    return this.alarm(
      'PublishBehind',
      this.pipelineMetric(METRIC.unpublishedCheckpoints, 'Maximum', checkpointInterval),
      {
        alarmDescription: `Pipeline ${pl}: ${noCommitIntervals} committed checkpoints or more are not in the Iceberg table: its publish fails every time (the output is committed; the table lags). First: the Publish step's errors in the state machine's history or the publish function's logs.`,
        threshold: noCommitIntervals,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        evaluationPeriods: 2,
      },
    );
  }

  /** The mapping's own lag metric (AWS/Lambda `OffsetLag`, dimension FunctionName): nothing here emits it. */
  private offsetLagMetric(period: Duration): cloudwatch.Metric {
    return this.props.processor.metric(AWS_LAMBDA_METRIC.offsetLag, { statistic: 'Maximum', period });
  }

  private offsetLagAlarm(pl: string): cloudwatch.Alarm {
    const threshold = this.props.offsetLagThreshold ?? DEFAULT_OFFSET_LAG_THRESHOLD;
    return this.alarm('OffsetLagHigh', this.offsetLagMetric(Duration.minutes(5)), {
      threshold,
      evaluationPeriods: 3,
      // The mapping reports OffsetLag only while it polls: no data is no lag to alarm on (NoCommit and
      // ProcessorErrors cover a stopped pipeline).
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      alarmDescription: `Pipeline ${pl}: the event source mapping's OffsetLag stayed at ${threshold} records or more for 15 minutes: the processor does not keep up with the topic, or a partition is stalled. First: check ProcessorErrors and the processor's logs for a partition that fails the same batch; if none, check throttles, duration and the mapping's pollers.`,
    });
  }

  /**
   * Contributor Insights over the processor's JSON logs: the lines `logRedeliveryDrops` writes, summed by topic and
   * partition. CloudWatch keeps the per-partition breakdown (the top contributors) without a custom metric per
   * partition.
   */
  private redeliveryDropsInsightRule(logGroup: logs.ILogGroup): cloudwatch.CfnInsightRule {
    const ruleName = `eos-${this.props.pipelineId}-redelivery-drops`;
    const body = {
      Schema: { Name: 'CloudWatchLogRule', Version: 1 },
      LogGroupNames: [logGroup.logGroupName],
      LogFormat: 'JSON',
      Contribution: {
        Keys: ['$.topic', '$.partition'],
        ValueOf: `$.${REDELIVERY_DROPS_LOG.countField}`,
        Filters: [{ Match: '$.message', In: [REDELIVERY_DROPS_LOG.message] }],
      },
      AggregateOn: 'Sum',
    };
    return new cloudwatch.CfnInsightRule(this, 'RedeliveryDropsRule', {
      ruleName,
      ruleState: 'ENABLED',
      ruleBody: Stack.of(this).toJsonString(body),
    });
  }

  /** The security alarms: any occurrence is an operator's business, except duplicates (a burst). */
  private securityAlarms(pl: string) {
    const fiveMinutes = Duration.minutes(5);
    const anyOf = (name: MetricName) => this.pipelineMetric(name, 'Sum', fiveMinutes);
    const once = { threshold: 1, treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING };
    const burst = this.props.duplicateBurstThreshold ?? DEFAULT_DUPLICATE_BURST_THRESHOLD;
    return {
      offsetsWentBackwards: this.alarm('OffsetsWentBackwards', anyOf(METRIC.offsetsWentBackwards), {
        ...once,
        alarmDescription: `Pipeline ${pl}: a partition's offsets went back below its fence (recreated topic or reset consumer group); that partition is stopped and nothing was acknowledged. First: read the processor's error log for the topic, partition and both offsets, find out why, then resume the partition into a new epoch with the operations command.`,
      }),
      fenceJump: this.alarm('FenceJump', anyOf(METRIC.fenceJumps), {
        ...once,
        alarmDescription: `Pipeline ${pl}: a batch started further above its partition's fence than maxFenceJump: a large gap in the topic, or an invocation with forged offsets. First: compare the logged offsets with the topic's (kafka-get-offsets); if the topic has no such records, check who may invoke the processor (CloudTrail lambda:Invoke).`,
      }),
      keyConflict: this.alarm('IdempotencyKeyConflict', anyOf(METRIC.keyConflicts), {
        ...once,
        alarmDescription: `Pipeline ${pl}: a record reused another record's idempotency key with a different payload and was dead-lettered as a conflict (not dropped). First: read the dead-letter rows of the conflict, and find the producer that reuses keys.`,
      }),
      eventRejected: this.alarm('EventRejected', anyOf(METRIC.eventsRejected), {
        ...once,
        alarmDescription: `Pipeline ${pl}: the processor refused an event before any effect (another event source or topic, or a malformed event); the mapping retries it, so its partition waits. First: read the processor's error for the source ARN and topic, and check the event source mappings that target the processor.`,
      }),
      duplicateKeyBurst: this.alarm('DuplicateKeyBurst', anyOf(METRIC.duplicatesByKey), {
        threshold: burst,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        alarmDescription: `Pipeline ${pl}: at least ${burst} records in 5 minutes were dropped as duplicates of an already claimed idempotency key: a producer replaying, or records suppressing others' keys. First: check which producer sent them (the processor's logs name the keys' partitions and offsets), and whether they are true retries.`,
      }),
    };
  }

  /** An EMF metric of this pipeline, with exactly the dimensions Powertools emits (`names.ts`). */
  pipelineMetric(name: MetricName, statistic: string, period: Duration): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE,
      metricName: name,
      dimensionsMap: metricDimensionsMap(this.props.pipelineId),
      statistic,
      period,
    });
  }

  private alarm(
    id: string,
    metric: cloudwatch.IMetric,
    options: Omit<cloudwatch.CreateAlarmOptions, 'evaluationPeriods'> & { evaluationPeriods?: number },
  ): cloudwatch.Alarm {
    const alarmName = `eos-${this.props.pipelineId}-${id}`;
    this.alarmNames.push(alarmName);
    const alarm = new cloudwatch.Alarm(this, id, {
      metric,
      alarmName,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      ...options,
    });
    alarm.addAlarmAction(new actions.SnsAction(this.props.alarmTopic));
    alarm.addOkAction(new actions.SnsAction(this.props.alarmTopic));
    return alarm;
  }
}
