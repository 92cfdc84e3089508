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
 * |                        | the partition)                                                                   |
 */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sns from 'aws-cdk-lib/aws-sns';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import {
  METRIC,
  METRICS_NAMESPACE,
  type MetricName,
  metricDimensionsMap,
} from '../shared/observability/names.ts';

export interface PipelineObservabilityProps {
  readonly pipelineId: string;
  readonly processor: lambda.IFunction;
  readonly stateMachine: sfn.IStateMachine;
  readonly monitor: lambda.IFunction;
  readonly checkpointInterval: Duration;
  readonly noCommitIntervals: number;
  readonly alarmTopic: sns.ITopic;
}

export class PipelineObservability extends Construct {
  readonly alarms: {
    readonly checkpointFailed: cloudwatch.Alarm;
    readonly noCommit: cloudwatch.Alarm;
    readonly deadLettered: cloudwatch.Alarm;
    readonly processorErrors: cloudwatch.Alarm;
  };
  readonly dashboard: cloudwatch.Dashboard;

  constructor(
    scope: Construct,
    id: string,
    private readonly props: PipelineObservabilityProps,
  ) {
    super(scope, id);
    const interval = props.checkpointInterval;
    const pl = props.pipelineId;
    const failedExecutions = new cloudwatch.MathExpression({
      label: 'failed, timed out or aborted executions',
      expression: 'FILL(failed, 0) + FILL(timedOut, 0) + FILL(aborted, 0)',
      usingMetrics: {
        failed: props.stateMachine.metricFailed({ statistic: 'Sum' }),
        timedOut: props.stateMachine.metricTimedOut({ statistic: 'Sum' }),
        aborted: props.stateMachine.metricAborted({ statistic: 'Sum' }),
      },
      period: Duration.minutes(5),
    });
    this.alarms = {
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
        props.processor.metricErrors({ statistic: 'Sum', period: Duration.minutes(5) }),
        {
          alarmDescription: `Pipeline ${pl}: processor invocations failed; the mapping retries the batch, and persistent errors stall the partition.`,
          threshold: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        },
      ),
    };
    this.dashboard = this.buildDashboard(failedExecutions);
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
    const alarm = new cloudwatch.Alarm(this, id, {
      metric,
      alarmName: `eos-${this.props.pipelineId}-${id}`,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      ...options,
    });
    alarm.addAlarmAction(new actions.SnsAction(this.props.alarmTopic));
    alarm.addOkAction(new actions.SnsAction(this.props.alarmTopic));
    return alarm;
  }

  private buildDashboard(failedExecutions: cloudwatch.IMetric): cloudwatch.Dashboard {
    const { processor, stateMachine, pipelineId } = this.props;
    const fiveMinutes = Duration.minutes(5);
    const sum = (name: MetricName) => this.pipelineMetric(name, 'Sum', fiveMinutes);
    const dashboard = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: `eos-${pipelineId}`,
      defaultInterval: Duration.hours(6),
    });
    dashboard.addWidgets(
      new cloudwatch.AlarmStatusWidget({
        title: 'Alarms',
        width: 24,
        height: 3,
        alarms: Object.values(this.alarms),
      }),
    );
    dashboard.addWidgets(
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
        title: 'Consumer lag (offsets behind, per the event source mapping)',
        width: 12,
        left: [
          new cloudwatch.MathExpression({
            label: 'OffsetLag',
            // No schema braces: matches OffsetLag under whatever dimension set the mapping reports it with.
            expression: `SEARCH('Namespace="AWS/Lambda" MetricName="OffsetLag" FunctionName="${processor.functionName}"', 'Maximum', 60)`,
            period: Duration.minutes(1),
          }),
        ],
      }),
    );
    dashboard.addWidgets(
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
          this.pipelineMetric(METRIC.consecutiveAborts, 'Maximum', fiveMinutes),
        ],
        right: [
          stateMachine.metric('ExecutionTime', { statistic: 'p90', label: 'checkpoint duration p90 (ms)' }),
          this.pipelineMetric(METRIC.checkpointDuration, 'p90', fiveMinutes),
        ],
      }),
    );
    dashboard.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Ledger ages (seconds)',
        width: 24,
        left: [
          this.pipelineMetric(METRIC.oldestUncommittedStagedAge, 'Maximum', this.props.checkpointInterval),
          this.pipelineMetric(METRIC.lastCommitAge, 'Maximum', this.props.checkpointInterval),
        ],
        leftAnnotations: [
          {
            value: this.props.noCommitIntervals * this.props.checkpointInterval.toSeconds(),
            label: 'NoCommit alarm threshold',
          },
        ],
        // The monitor's own failures show up here before the NoCommit alarm's missing-data rule fires.
        right: [this.props.monitor.metricErrors({ statistic: 'Sum', label: 'monitor errors' })],
      }),
    );
    return dashboard;
  }
}
