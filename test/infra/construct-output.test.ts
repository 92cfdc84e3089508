/**
 * The construct's output options as a deployed stack gets them: with `outputFormat: 'parquet'`
 * every function's environment carries the transform's columns (a built-in's or a user module's, read at synth),
 * so the Lambdas parse their settings at cold start exactly as `eos local --format parquet` does; `analyticsTable`
 * adds the Glue table over those columns; `eventSourceMapping: false` deploys without the mapping (LocalStack's
 * free edition, docs/localstack.md) and names the processor in the outputs. Judged on the synthesized template.
 */
import { Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ExactlyOncePipeline } from '../../infra/exactly-once-pipeline.ts';
import { unacknowledgedNagFindings } from '../../infra/nag.ts';
import { ExactlyOncePipelineStack } from '../../infra/stack.ts';
import { settingsFromEnv } from '../../shared/config/settings.ts';
import { builtinDefinition } from '../../shared/transforms/registry.ts';
import { BASE_PROPS, resourcesOf, synthesize, testApp } from '../support/infra.ts';

const PAGE_VIEWS = 'test/fixtures/infra/page-views.ts#pageViews';

/** Each function's `EOS_*` variables (plain strings only: tokens resolve to objects in the template). */
function functionEnvironments(template: Template): Array<Record<string, string>> {
  return Object.values(resourcesOf(template, 'AWS::Lambda::Function'))
    .map(
      (fn) => (fn.Properties.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables,
    )
    .filter((vars): vars is Record<string, unknown> => vars?.EOS_PIPELINE_ID !== undefined)
    .map((vars) =>
      Object.fromEntries(
        Object.entries(vars).map(([name, value]) => [name, typeof value === 'string' ? value : 'token']),
      ),
    );
}

describe('outputFormat parquet: the columns reach every function', () => {
  it("sets EOS_OUTPUT_COLUMNS to the built-in transform's columns, and the Lambdas' settings parse", () => {
    const { template } = synthesize({ outputFormat: 'parquet', timePartitioning: 'hour' });
    const environments = functionEnvironments(template);
    // The processor, the coordinator's function and the monitor.
    expect(environments.length).toBeGreaterThanOrEqual(3);
    const expected = builtinDefinition('orders').columns;
    for (const env of environments) {
      expect(JSON.parse(env.EOS_OUTPUT_COLUMNS!)).toEqual(expected);
      // What a cold start does: a Parquet function without columns would fail here.
      const settings = settingsFromEnv({ ...env, EOS_LEDGER_TABLE: 'ledger', EOS_BUCKET: 'sink-bucket' });
      expect(settings.outputFormat).toBe('parquet');
      expect(settings.outputColumns).toEqual(expected);
    }
  });

  it("takes a module transform's columns from the module, read at synth", () => {
    const { template } = synthesize({ outputFormat: 'parquet', transform: PAGE_VIEWS });
    const [env] = functionEnvironments(template);
    expect(JSON.parse(env!.EOS_OUTPUT_COLUMNS!).map((c: { name: string }) => c.name)).toEqual([
      'userId',
      'page',
      'marker',
    ]);
  });

  it('leaves NDJSON functions without columns', () => {
    const { template } = synthesize();
    for (const env of functionEnvironments(template)) expect(env.EOS_OUTPUT_COLUMNS).toBeUndefined();
  });
});

describe('analyticsTable', () => {
  it('creates the Glue table over the Parquet output with the transform columns and the time partitions', () => {
    const { stack, template } = synthesize(
      { outputFormat: 'parquet', timePartitioning: 'day', analyticsTable: true },
      { nag: true },
    );
    const [table] = Object.values(resourcesOf(template, 'AWS::Glue::Table'));
    const input = table!.Properties.TableInput as {
      StorageDescriptor: { Columns: Array<{ Name: string }> };
      PartitionKeys: Array<{ Name: string }>;
    };
    // Glue keeps names in lower case; Athena matches Parquet columns by name without case.
    const columns = input.StorageDescriptor.Columns.map((c) => c.Name);
    for (const column of builtinDefinition('orders').columns)
      expect(columns).toContain(column.name.toLowerCase());
    expect(input.PartitionKeys.map((k) => k.Name)).toEqual(['dt']);
    expect(Object.keys(resourcesOf(template, 'AWS::Athena::WorkGroup'))).toHaveLength(1);
    expect(stack.pipeline.analytics?.workgroupName).toBe('eos-orders');
    const outputs = Object.keys(template.findOutputs('*'));
    expect(outputs.some((id) => id.includes('AthenaWorkGroup'))).toBe(true);
    expect(unacknowledgedNagFindings(stack)).toEqual([]);
  });

  it('refuses NDJSON output at synth, naming the prop', () => {
    expect(() => synthesize({ analyticsTable: true })).toThrow(
      /^invalid setting analyticsTable: needs outputFormat 'parquet'/,
    );
  });

  it('is off by default', () => {
    const { template } = synthesize({ outputFormat: 'parquet' });
    expect(resourcesOf(template, 'AWS::Glue::Table')).toEqual({});
  });
});

describe('eventSourceMapping: false', () => {
  it('deploys without a mapping and names the processor in the outputs', () => {
    const { stack, template } = synthesize({ eventSourceMapping: false });
    expect(resourcesOf(template, 'AWS::Lambda::EventSourceMapping')).toEqual({});
    expect(stack.pipeline.eventSource).toBeUndefined();
    const outputs = template.findOutputs('*');
    const name = Object.keys(outputs).find((id) => id.includes('ProcessorFunctionName'));
    expect(name).toBeDefined();
    // The processor still refuses events of any other cluster: the recorded event must name this one.
    const [env] = functionEnvironments(template);
    expect(env!.EOS_EVENT_SOURCE_ARN).toBe(BASE_PROPS.mskClusterArn);
  });

  it('has a mapping by default', () => {
    const stack = new Stack(testApp(), 'Default');
    new ExactlyOncePipeline(stack, 'P', BASE_PROPS);
    expect(
      Object.keys(resourcesOf(Template.fromStack(stack), 'AWS::Lambda::EventSourceMapping')),
    ).toHaveLength(1);
  });
});

describe('the stack takes both from context', () => {
  const context = { mskClusterArn: BASE_PROPS.mskClusterArn, mskVpcId: BASE_PROPS.mskVpcId, topic: 'orders' };

  it('-c eventSourceMapping=false -c analyticsTable=true -c outputFormat=parquet', () => {
    const app = testApp({
      ...context,
      eventSourceMapping: 'false',
      analyticsTable: 'true',
      outputFormat: 'parquet',
    });
    const stack = new ExactlyOncePipelineStack(app, 'FromContext');
    const template = Template.fromStack(stack);
    expect(resourcesOf(template, 'AWS::Lambda::EventSourceMapping')).toEqual({});
    expect(Object.keys(resourcesOf(template, 'AWS::Glue::Table'))).toHaveLength(1);
  });

  it('-c operatorRoleArns gives the listed roles the operator grants (eos epoch, redrive, replay)', () => {
    const app = testApp({
      ...context,
      operatorRoleArns: 'arn:aws:iam::123456789012:role/ops, arn:aws:iam::123456789012:role/team/oncall',
    });
    const template = Template.fromStack(new ExactlyOncePipelineStack(app, 'Operators'));
    const policies = Object.values(resourcesOf(template, 'AWS::IAM::Policy')).map((p) =>
      JSON.stringify(p.Properties),
    );
    for (const role of ['"ops"', '"oncall"']) {
      const own = policies.filter((p) => p.includes(`"Roles":[${role}]`));
      expect(own.join('\n'), role).toMatch(/OperateReplayPlans/);
      expect(own.join('\n'), role).toMatch(/kafka-cluster:DescribeTopic/);
    }
    for (const [bad, message] of [
      ['arn:aws:iam::123456789012:user/ops', /"arn:aws:iam::123456789012:user\/ops" is not an IAM role ARN/],
      ['ops', /"ops" is not an IAM role ARN/],
    ] as const) {
      expect(
        () => new ExactlyOncePipelineStack(testApp({ ...context, operatorRoleArns: bad }), 'Bad'),
      ).toThrow(message);
    }
    const inAccount = testApp({ ...context, operatorRoleArns: 'arn:aws:iam::210987654321:role/ops' });
    expect(
      () =>
        new ExactlyOncePipelineStack(inAccount, 'Elsewhere', {
          env: { account: '123456789012', region: 'eu-west-1' },
        }),
    ).toThrow(/is a role of account 210987654321, not of the stack's 123456789012/);
  });

  it('refuses a value that is not true or false, naming the -c key', () => {
    const app = testApp({ ...context, eventSourceMapping: 'no' });
    expect(() => new ExactlyOncePipelineStack(app, 'Bad')).toThrow(
      'invalid setting -c eventSourceMapping: expected true or false, got "no"',
    );
  });
});
