/**
 * Freshness and lag in the stack: the OffsetLagHigh alarm on Lambda's own OffsetLag metric, the
 * Contributor Insights rule of redelivery drops per partition over the processor's log group, and the dashboard
 * graphs of commit latency, last commit age, uncommitted records, offset lag and the rule's top contributors.
 */
import { Duration, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { describe, expect, it } from 'vitest';
import { DEFAULT_OFFSET_LAG_THRESHOLD, PipelineObservability } from '../../infra/observability.ts';
import { METRIC, REDELIVERY_DROPS_LOG } from '../../shared/observability/names.ts';
import { resourcesOf, synthesize } from '../support/infra.ts';

const { stack, template } = synthesize();
const processorId = stack.getLogicalId(stack.pipeline.processor.node.defaultChild as never);
const logGroupId = stack.getLogicalId(stack.pipeline.processor.logGroupOwn.node.defaultChild as never);

/** The dashboard body with its Fn::Join flattened: tokens stay as their JSON. */
function dashboardBody(t: Template): string {
  const [dashboard] = Object.values(resourcesOf(t, 'AWS::CloudWatch::Dashboard'));
  const body = dashboard!.Properties.DashboardBody as { 'Fn::Join': [string, unknown[]] };
  return body['Fn::Join'][1].map((part) => (typeof part === 'string' ? part : JSON.stringify(part))).join('');
}

describe('the OffsetLagHigh alarm', () => {
  it("watches the mapping's own OffsetLag (AWS/Lambda, FunctionName of the processor) for 15 minutes", () => {
    const alarm = Object.values(resourcesOf(template, 'AWS::CloudWatch::Alarm')).find(
      (a) => a.Properties.AlarmName === 'eos-orders-OffsetLagHigh',
    );
    expect(alarm?.Properties).toMatchObject({
      Namespace: 'AWS/Lambda',
      MetricName: 'OffsetLag',
      Dimensions: [{ Name: 'FunctionName', Value: { Ref: processorId } }],
      Statistic: 'Maximum',
      Period: 300,
      EvaluationPeriods: 3,
      Threshold: DEFAULT_OFFSET_LAG_THRESHOLD,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'notBreaching',
    });
    expect(String(alarm?.Properties.AlarmDescription)).toMatch(/First: /);
  });

  it('takes its threshold from the construct prop', () => {
    const bare = new Stack();
    const fn = new lambda.Function(bare, 'Fn', {
      runtime: lambda.Runtime.NODEJS_22_X,
      handler: 'index.handler',
      code: lambda.Code.fromInline('exports.handler = async () => {}'),
    });
    const observability = new PipelineObservability(bare, 'Obs', {
      pipelineId: 'p',
      processor: fn,
      monitor: fn,
      stateMachine: new sfn.StateMachine(bare, 'Sm', {
        definitionBody: sfn.DefinitionBody.fromChainable(new sfn.Pass(bare, 'Pass')),
      }),
      checkpointInterval: Duration.minutes(1),
      noCommitIntervals: 3,
      alarmTopic: new sns.Topic(bare, 'Topic'),
      offsetLagThreshold: 2500,
    });
    const t = Template.fromStack(bare);
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmName: 'eos-p-OffsetLagHigh',
      MetricName: 'OffsetLag',
      Threshold: 2500,
    });
    // No processor log group given: no Contributor Insights rule, and no widget of one.
    expect(observability.redeliveryDropsRule).toBeUndefined();
    t.resourceCountIs('AWS::CloudWatch::InsightRule', 0);
    expect(dashboardBody(t)).not.toContain('insightRule');
  });
});

describe('the Contributor Insights rule of redelivery drops', () => {
  it("sums the processor's redelivery-drop lines by topic and partition, over the processor's own log group", () => {
    const rules = Object.values(resourcesOf(template, 'AWS::CloudWatch::InsightRule'));
    expect(rules).toHaveLength(1);
    const rule = rules[0]!.Properties;
    expect(rule).toMatchObject({ RuleName: 'eos-orders-redelivery-drops', RuleState: 'ENABLED' });
    // The log group's name is a token (Ref): stand in a placeholder for it inside its quotes.
    const joined = stack.resolve(stack.pipeline.observability.redeliveryDropsRule!.ruleBody) as {
      'Fn::Join': [string, unknown[]];
    };
    const body = JSON.parse(
      joined['Fn::Join'][1].map((part) => (typeof part === 'string' ? part : 'LOG_GROUP')).join(''),
    );
    expect(body).toEqual({
      Schema: { Name: 'CloudWatchLogRule', Version: 1 },
      LogGroupNames: ['LOG_GROUP'],
      LogFormat: 'JSON',
      Contribution: {
        Keys: ['$.topic', '$.partition'],
        ValueOf: `$.${REDELIVERY_DROPS_LOG.countField}`,
        Filters: [{ Match: '$.message', In: [REDELIVERY_DROPS_LOG.message] }],
      },
      AggregateOn: 'Sum',
    });
    expect(JSON.stringify(rule.RuleBody)).toContain(`{"Ref":"${logGroupId}"}`);
  });
});

describe('the dashboard', () => {
  it('graphs commit latency, the last commit age, uncommitted records, the offset lag and the top partitions of redelivery drops', () => {
    const body = dashboardBody(template);
    for (const metric of [METRIC.commitLatency, METRIC.lastCommitAge, METRIC.uncommittedRecords])
      expect(body, metric).toContain(`"${metric}"`);
    expect(body).toContain('MetricName=\\"OffsetLag\\"');
    expect(body).toContain('OffsetLagHigh alarm threshold');
    expect(body).toContain('"insightRule":{"ruleName":"eos-orders-redelivery-drops"');
  });
});
