/**
 * One pipeline's CloudWatch dashboard, row by row: its alarms' states; records, anomalies and the mapping's lag;
 * the processor and the checkpoints; the ledger ages the monitor reports; freshness; then the replay processor and
 * the redelivery drops' top partitions when there are such.
 */
import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import type { Construct } from 'constructs';
import { AWS_LAMBDA_METRIC, METRIC, type MetricName } from '../shared/observability/names.ts';

/** What the dashboard shows: the pipeline's functions and state machine, its alarms and its metrics. */
export interface PipelineDashboardInput {
  readonly pipelineId: string;
  readonly processor: lambda.IFunction;
  readonly stateMachine: sfn.IStateMachine;
  /** The Express state machine the schedule starts, when the coordinator has one. */
  readonly expressStateMachine?: sfn.IStateMachine;
  readonly monitor: lambda.IFunction;
  readonly checkpointInterval: Duration;
  readonly noCommitIntervals: number;
  /** The OffsetLagHigh alarm's threshold, drawn on the lag graph. */
  readonly offsetLagThreshold: number;
  readonly replayProcessor?: { readonly function: lambda.IFunction; readonly generation: number };
  /** Every alarm, in the order of the status row. */
  readonly alarms: readonly cloudwatch.IAlarm[];
  /** The state machine's failed, timed-out and aborted executions (the CheckpointFailed alarm's metric). */
  readonly failedExecutions: cloudwatch.IMetric;
  /** The Contributor Insights rule of redelivery drops; without it, no row of it. */
  readonly redeliveryDropsRuleName?: string;
  /** An EMF metric of the pipeline, as its alarms read it. */
  readonly metric: (name: MetricName, statistic: string, period: Duration) => cloudwatch.Metric;
}

/** The dashboard (`eos-<pipeline>`, construct id `Dashboard` under `scope`). */
export function buildPipelineDashboard(
  scope: Construct,
  input: PipelineDashboardInput,
): cloudwatch.Dashboard {
  const dashboard = new cloudwatch.Dashboard(scope, 'Dashboard', {
    dashboardName: `eos-${input.pipelineId}`,
    defaultInterval: Duration.hours(6),
  });
  dashboard.addWidgets(
    new cloudwatch.AlarmStatusWidget({ title: 'Alarms', width: 24, height: 3, alarms: [...input.alarms] }),
  );
  dashboard.addWidgets(...recordWidgets(input));
  dashboard.addWidgets(...runtimeWidgets(input));
  dashboard.addWidgets(...ledgerWidgets(input));
  dashboard.addWidgets(...freshnessWidgets(input));
  for (const row of optionalWidgets(scope, input)) dashboard.addWidgets(row);
  return dashboard;
}

/** Records staged, dropped and dead-lettered; the anomalies that alarm; the mapping's lag. */
function recordWidgets(input: PipelineDashboardInput): cloudwatch.IWidget[] {
  const sum = (name: MetricName) => input.metric(name, 'Sum', Duration.minutes(5));
  return [
    new cloudwatch.GraphWidget({
      title: 'Records',
      width: 12,
      left: [
        sum(METRIC.recordsStaged),
        sum(METRIC.duplicatesByOffset),
        sum(METRIC.duplicatesByKey),
        sum(METRIC.deadLettered),
      ],
    }),
    new cloudwatch.GraphWidget({
      title: 'Source and key anomalies (each one alarms)',
      width: 12,
      left: [
        sum(METRIC.offsetsWentBackwards),
        sum(METRIC.fenceJumps),
        sum(METRIC.keyConflicts),
        sum(METRIC.eventsRejected),
      ],
    }),
    new cloudwatch.GraphWidget({
      title: 'Consumer lag (offsets behind, per the event source mapping)',
      width: 12,
      left: [
        new cloudwatch.MathExpression({
          label: 'OffsetLag',
          // No schema braces: matches OffsetLag under whatever dimension set the mapping reports it with.
          expression: `SEARCH('Namespace="AWS/Lambda" MetricName="${AWS_LAMBDA_METRIC.offsetLag}" FunctionName="${input.processor.functionName}"', 'Maximum', 60)`,
          period: Duration.minutes(1),
        }),
      ],
      leftAnnotations: [
        {
          value: input.offsetLagThreshold,
          label: 'OffsetLagHigh alarm threshold',
        },
      ],
    }),
  ];
}

/** The processor's invocations and the checkpoints' executions. */
function runtimeWidgets(input: PipelineDashboardInput): cloudwatch.IWidget[] {
  const { processor, failedExecutions } = input;
  // The one the schedule starts: its executions are the checkpoints.
  const stateMachine = input.expressStateMachine ?? input.stateMachine;
  const fiveMinutes = Duration.minutes(5);
  return [
    new cloudwatch.GraphWidget({
      title: 'Processor',
      width: 12,
      left: [processor.metricInvocations(), processor.metricErrors(), processor.metricThrottles()],
      right: [processor.metricDuration({ statistic: 'p99' })],
    }),
    new cloudwatch.GraphWidget({
      title: 'Checkpoints',
      width: 12,
      left: [
        stateMachine.metricSucceeded({ statistic: 'Sum' }),
        failedExecutions,
        input.metric(METRIC.consecutiveAborts, 'Maximum', fiveMinutes),
      ],
      right: [
        stateMachine.metric('ExecutionTime', { statistic: 'p90', label: 'checkpoint duration p90 (ms)' }),
        input.metric(METRIC.checkpointDuration, 'p90', fiveMinutes),
      ],
    }),
  ];
}

/** The monitor's report: how old the oldest uncommitted staged file and the last commit are. */
function ledgerWidgets(input: PipelineDashboardInput): cloudwatch.IWidget[] {
  const { checkpointInterval } = input;
  return [
    new cloudwatch.GraphWidget({
      title: 'Ledger ages (seconds)',
      width: 24,
      left: [
        input.metric(METRIC.oldestUncommittedStagedAge, 'Maximum', checkpointInterval),
        input.metric(METRIC.lastCommitAge, 'Maximum', checkpointInterval),
      ],
      leftAnnotations: [
        {
          value: input.noCommitIntervals * checkpointInterval.toSeconds(),
          label: 'NoCommit alarm threshold',
        },
      ],
      // The monitor's own failures show up here before the NoCommit alarm's missing-data rule fires.
      right: [input.monitor.metricErrors({ statistic: 'Sum', label: 'monitor errors' })],
    }),
  ];
}

/** How long staged records wait to be visible, and how many wait now. */
function freshnessWidgets(input: PipelineDashboardInput): cloudwatch.IWidget[] {
  const fiveMinutes = Duration.minutes(5);
  return [
    new cloudwatch.GraphWidget({
      title: 'Freshness: commit latency, staging to visibility (ms)',
      width: 12,
      left: [
        input.metric(METRIC.commitLatency, 'Maximum', fiveMinutes),
        input.metric(METRIC.commitLatency, 'p50', fiveMinutes),
      ],
    }),
    new cloudwatch.GraphWidget({
      title: 'Records staged, not committed yet (all partitions)',
      width: 12,
      left: [input.metric(METRIC.uncommittedRecords, 'Maximum', input.checkpointInterval)],
    }),
  ];
}

/** One row each: the replay processor (with a replay), the redelivery drops' top partitions (with the rule). */
function optionalWidgets(scope: Construct, input: PipelineDashboardInput): cloudwatch.IWidget[] {
  const rows: cloudwatch.IWidget[] = [];
  const replay = input.replayProcessor;
  if (replay) {
    const fn = replay.function;
    rows.push(
      new cloudwatch.GraphWidget({
        title: `Replay processor (generation ${replay.generation})`,
        width: 24,
        left: [fn.metricInvocations(), fn.metricErrors(), fn.metricThrottles()],
        right: [fn.metricDuration({ statistic: 'p99' })],
      }),
    );
  }
  if (input.redeliveryDropsRuleName !== undefined) {
    rows.push(
      new ContributorInsightsWidget({
        title:
          'Redelivered records dropped, top partitions (a burst: offsets went backwards or a group reset)',
        ruleName: input.redeliveryDropsRuleName,
        region: Stack.of(scope).region,
        width: 24,
        height: 6,
      }),
    );
  }
  return rows;
}

/**
 * A dashboard widget of a Contributor Insights rule's top contributors. CloudWatch dashboards have such a widget
 * (a metric widget with `insightRule`), aws-cdk-lib no class for it: this writes its JSON.
 */
class ContributorInsightsWidget extends cloudwatch.ConcreteWidget {
  constructor(
    private readonly options: {
      readonly title: string;
      readonly ruleName: string;
      readonly region: string;
      readonly width: number;
      readonly height: number;
    },
  ) {
    super(options.width, options.height);
  }

  toJson(): unknown[] {
    return [
      {
        type: 'metric',
        width: this.width,
        height: this.height,
        x: this.x,
        y: this.y,
        properties: {
          title: this.options.title,
          region: this.options.region,
          view: 'timeSeries',
          stacked: false,
          insightRule: { ruleName: this.options.ruleName, maxContributorCount: 10, orderBy: 'Sum' },
          legend: { position: 'bottom' },
        },
      },
    ];
  }
}
