/**
 * The construct's `iceberg` prop: a Publish step in the deployed definition with a function and role of its own,
 * the Glue database and table Athena queries, and grants scoped to the publish step alone; validation in one line
 * naming the field; and a stack without the prop that is the stack without it (nothing added to any role, the
 * definition without a publish state).
 */
import { Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import { describe, expect, it } from 'vitest';
import type { ExactlyOncePipelineProps } from '../../infra/exactly-once-pipeline.ts';
import { unacknowledgedNagFindings } from '../../infra/nag.ts';
import { ExactlyOncePipelineStack } from '../../infra/stack.ts';
import { buildCoordinatorDefinition, COORDINATOR_STEPS } from '../../shared/coordinator/definition.ts';
import { InvalidSettingError } from '../../shared/errors.ts';
import { resolveIntrinsics } from '../support/asl.ts';
import {
  actionsOf,
  allStatements,
  BASE_PROPS,
  type PolicyStatementJson,
  resourcesOf,
  resourcesOfStatement,
  type Synthesized,
  synthesize,
  testApp,
} from '../support/infra.ts';

const PARQUET: Partial<ExactlyOncePipelineProps> = { outputFormat: 'parquet', timePartitioning: 'hour' };
const GLUE = { ...PARQUET, iceberg: { catalog: 'glue' as const } };

type Json = Record<string, unknown>;
type TemplateJson = Parameters<typeof resolveIntrinsics>[1];

function definitionOf({ template }: Synthesized): { states: Json; substitutions: Json } {
  const machine = Object.values(resourcesOf(template, 'AWS::StepFunctions::StateMachine'))[0]!;
  const text = String(machine.Properties.DefinitionString);
  return {
    states: (JSON.parse(text) as { States: Json }).States,
    substitutions: machine.Properties.DefinitionSubstitutions as Json,
  };
}

function logicalIdOf(synthesized: Synthesized, construct: { node: { defaultChild?: unknown } }): string {
  return synthesized.stack.getLogicalId(construct.node.defaultChild as never);
}

/** The statements of the policies attached to a function's role. */
function roleStatementsOf(
  synthesized: Synthesized,
  functionId: string,
): Array<PolicyStatementJson & { policy: string }> {
  const fn = synthesized.template.toJSON().Resources[functionId] as { Properties: { Role: Json } };
  const role = (fn.Properties.Role as { 'Fn::GetAtt': [string] })['Fn::GetAtt'][0];
  return allStatements(synthesized.template).filter((statement) => {
    const policy = resourcesOf(synthesized.template, 'AWS::IAM::Policy')[statement.policy]!;
    return JSON.stringify(policy.Properties.Roles).includes(`"${role}"`);
  });
}

function environmentOf(synthesized: Synthesized, functionId: string): Record<string, unknown> {
  const fn = resourcesOf(synthesized.template, 'AWS::Lambda::Function')[functionId]!;
  return (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
}

function refusal(props: Partial<ExactlyOncePipelineProps>): InvalidSettingError {
  try {
    synthesize(props);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidSettingError);
    return error as InvalidSettingError;
  }
  throw new Error('synthesized');
}

describe('the iceberg prop', () => {
  const plain = synthesize(PARQUET);
  const glue = synthesize(GLUE);
  const publishId = logicalIdOf(glue, glue.stack.pipeline.coordinator.publishFunction!);

  it('adds a Publish step and its function to the deployed definition; without it, the definition is the default one', () => {
    const withTable = definitionOf(glue);
    expect(Object.keys(withTable.states)).toEqual(expect.arrayContaining(['Publish', 'CatchUpPublish']));
    expect(withTable.substitutions.PublishFunctionArn).toEqual({ 'Fn::GetAtt': [publishId, 'Arn'] });
    const fn = resourcesOf(glue.template, 'AWS::Lambda::Function')[publishId]!;
    expect(fn.Properties.Handler).toMatch(/\.publish$/);

    const without = definitionOf(plain);
    expect(Object.keys(without.states)).not.toContain('Publish');
    expect(Object.keys(without.substitutions).sort()).toEqual(
      COORDINATOR_STEPS.map((step) => `${step[0]!.toUpperCase()}${step.slice(1)}FunctionArn`).sort(),
    );
    const machine = Object.values(resourcesOf(plain.template, 'AWS::StepFunctions::StateMachine'))[0]!;
    expect(machine.Properties.DefinitionString).toBe(
      JSON.stringify(buildCoordinatorDefinition({ taskTimeoutSeconds: 360, executionTimeoutSeconds: 3600 })),
    );
    expect(plain.stack.pipeline.coordinator.publishFunction).toBeUndefined();
    expect(plain.stack.pipeline.iceberg).toBeUndefined();
  });

  it('adds only the publish function, its role and policy, and the Glue database and table; every other resource is unchanged', () => {
    const before = plain.template.toJSON().Resources as Record<string, Json>;
    const after = glue.template.toJSON().Resources as Record<string, Json>;
    const added = Object.keys(after).filter((id) => !(id in before));
    const types = added.map((id) => after[id]!.Type).sort();
    expect(types).toEqual(
      [
        'AWS::CloudWatch::Alarm',
        'AWS::Glue::Database',
        'AWS::Glue::Table',
        'AWS::IAM::Policy',
        'AWS::IAM::Role',
        'AWS::Lambda::Function',
        'AWS::Logs::LogGroup',
      ].sort(),
    );
    expect(Object.keys(before).filter((id) => !(id in after))).toEqual([]);
    // Changed: the state machine (its definition) and its role's policy (invoking the publish function); the
    // monitor (the table's settings, to report how far the table is behind) and, for the PublishBehind alarm, the
    // alarm topic's policy (it names every alarm) and the dashboard (it shows every alarm).
    const machineId = Object.keys(resourcesOf(plain.template, 'AWS::StepFunctions::StateMachine'))[0]!;
    const monitorId = logicalIdOf(glue, glue.stack.pipeline.monitor);
    const topicPolicies = Object.keys(resourcesOf(plain.template, 'AWS::SNS::TopicPolicy'));
    const dashboards = Object.keys(resourcesOf(plain.template, 'AWS::CloudWatch::Dashboard'));
    const changed = Object.keys(before).filter(
      (id) => JSON.stringify(before[id]) !== JSON.stringify(after[id]),
    );
    for (const id of changed) {
      const invokesPublish = JSON.stringify(after[id]).includes(publishId);
      const watchesTable = id === monitorId || topicPolicies.includes(id) || dashboards.includes(id);
      expect(id === machineId || invokesPublish || watchesTable, `${id} changed`).toBe(true);
    }
    expect(changed).toContain(machineId);
    expect(changed).toContain(monitorId);
  });

  it('alarms when committed checkpoints pile up unpublished (PublishBehind), with a table only', () => {
    const alarms = (synthesized: Synthesized) =>
      Object.values(resourcesOf(synthesized.template, 'AWS::CloudWatch::Alarm')).map((a) => a.Properties);
    expect(alarms(glue).find((a) => a.AlarmName === 'eos-orders-PublishBehind')).toMatchObject({
      MetricName: 'UnpublishedCheckpoints',
      Statistic: 'Maximum',
      Threshold: 3,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      EvaluationPeriods: 2,
      TreatMissingData: 'notBreaching',
    });
    expect(glue.stack.pipeline.observability.alarmNames).toContain('eos-orders-PublishBehind');
    expect(alarms(plain).map((a) => a.AlarmName)).not.toContain('eos-orders-PublishBehind');
  });

  it('creates the Glue database and an Iceberg table without metadata at the table prefix of the sink bucket', () => {
    const databases = Object.values(resourcesOf(glue.template, 'AWS::Glue::Database'));
    expect(databases.map((d) => (d.Properties.DatabaseInput as Json).Name)).toEqual(['eos_orders_iceberg']);
    const [table] = Object.values(resourcesOf(glue.template, 'AWS::Glue::Table'));
    const input = table!.Properties.TableInput as Json;
    expect(input).toMatchObject({
      Name: 'output',
      TableType: 'EXTERNAL_TABLE',
      Parameters: { table_type: 'ICEBERG' },
    });
    expect(JSON.stringify(input)).not.toContain('metadata_location');
    const location = resolveIntrinsics(
      (input.StorageDescriptor as Json).Location,
      glue.template.toJSON() as TemplateJson,
    );
    expect(String(location)).toMatch(/^s3:\/\/.+\/orders\/iceberg\/output$/);
    expect(table!.DeletionPolicy).toBe('Retain');
  });

  it('names the table in the stack outputs: the Glue database.table, a file table by its location', () => {
    const outputs = (synthesized: Synthesized) =>
      Object.entries(synthesized.template.toJSON().Outputs as Record<string, { Value: unknown }>)
        .filter(([id]) => id.includes('IcebergTable'))
        .map(([, output]) => output.Value);
    expect(outputs(glue)).toEqual(['eos_orders_iceberg.output']);
    expect(outputs(plain)).toEqual([]);
    const file = synthesize({ ...PARQUET, iceberg: { catalog: 'file' } });
    expect(JSON.stringify(outputs(file))).toContain('/orders/iceberg/output');
  });

  it('sets EOS_ICEBERG_* on the publish function and the monitor only', () => {
    const monitorId = logicalIdOf(glue, glue.stack.pipeline.monitor);
    for (const id of [publishId, monitorId]) {
      expect(environmentOf(glue, id)).toMatchObject({
        EOS_ICEBERG_CATALOG: 'glue',
        EOS_ICEBERG_DATABASE: 'eos_orders_iceberg',
        EOS_ICEBERG_TABLE: 'output',
        EOS_ICEBERG_TABLE_PREFIX: 'orders/iceberg/output',
        EOS_ICEBERG_PARTITIONING: 'time-folders',
        EOS_OUTPUT_FORMAT: 'parquet',
      });
    }
    for (const [id] of Object.entries(resourcesOf(glue.template, 'AWS::Lambda::Function'))) {
      if (id === publishId || id === monitorId) continue;
      const names = Object.keys(
        (
          resourcesOf(glue.template, 'AWS::Lambda::Function')[id]!.Properties.Environment as
            | { Variables?: Json }
            | undefined
        )?.Variables ?? {},
      );
      expect(
        names.filter((name) => name.startsWith('EOS_ICEBERG_')),
        id,
      ).toEqual([]);
    }
  });

  it('grants the publish role only its ledger items, the manifests, the metadata prefix and the catalog calls on its table', () => {
    const statements = roleStatementsOf(glue, publishId);
    const template = glue.template.toJSON() as TemplateJson;
    const described = statements
      .filter((statement) => !actionsOf(statement).every((action) => action.startsWith('xray:')))
      .map((statement) => ({
        actions: [...actionsOf(statement)].sort(),
        resources: resourcesOfStatement(statement).map((r) => String(resolveIntrinsics(r, template))),
        condition: statement.Condition,
      }));
    const ledger = described.filter((d) => d.actions.some((a) => a.startsWith('dynamodb:')));
    expect(ledger).toHaveLength(1);
    expect(ledger[0]!.actions).toEqual(['dynamodb:GetItem', 'dynamodb:PutItem']);
    expect(ledger[0]!.condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['orders#CHECKPOINT'] },
    });
    const objects = described.filter((d) => d.actions.some((a) => /^s3:(Get|Put)Object$/.test(a)));
    expect(
      objects.map((d) => [d.actions.join(','), d.resources.map((r) => r.slice(r.indexOf('/orders/') + 1))]),
    ).toEqual([
      ['s3:GetObject', ['orders/_manifests/*']],
      ['s3:GetObject', ['orders/final/output/*']],
      ['s3:GetObject,s3:PutObject', ['orders/iceberg/output/metadata/*']],
    ]);
    const list = described.filter((d) => d.actions.includes('s3:ListBucket'));
    expect(list.map((d) => d.condition)).toEqual([
      {
        StringLike: {
          's3:prefix': ['orders/_manifests/*', 'orders/final/output/*', 'orders/iceberg/output/metadata/*'],
        },
      },
    ]);
    const catalog = described.filter((d) => d.actions.some((a) => a.startsWith('glue:')));
    expect(catalog).toHaveLength(1);
    expect(catalog[0]!.actions).toEqual(['glue:CreateTable', 'glue:GetTable', 'glue:UpdateTable']);
    expect(catalog[0]!.resources.map((r) => r.replace(/^arn:[^:]+:glue:[^:]*:[^:]*:/, ''))).toEqual([
      'catalog',
      'database/eos_orders_iceberg',
      'table/eos_orders_iceberg/output',
    ]);
    const logs = described.filter((d) => d.actions.every((a) => a.startsWith('logs:')));
    expect(logs.map((d) => d.resources.every((r) => r.includes('PublishFunctionLogs')))).toEqual([true]);
    const accounted = logs.length + ledger.length + objects.length + list.length + catalog.length;
    expect(accounted).toBe(described.length);
  });

  it("gives no other role any of the publish step's grants, and changes no other role", () => {
    const publishPolicies = new Set(roleStatementsOf(glue, publishId).map((s) => s.policy));
    const others = allStatements(glue.template).filter((s) => !publishPolicies.has(s.policy));
    expect(
      others.filter((s) => actionsOf(s).some((a) => a.startsWith('glue:') && a !== 'glue:GetSchemaVersion')),
    ).toEqual([]);
    expect(others.filter((s) => JSON.stringify(s).includes('iceberg'))).toEqual([]);
    // The default stack's policies are all there, as they were.
    const before = allStatements(plain.template).map((s) => JSON.stringify(s));
    const after = new Set(allStatements(glue.template).map((s) => JSON.stringify(s)));
    expect(before.filter((s) => !after.has(s))).toEqual([]);
  });

  it('file: no Glue resources and no catalog grants; the metadata prefix as given', () => {
    const file = synthesize({
      ...PARQUET,
      iceberg: { catalog: 'file', tablePrefix: 'tables/orders', partitioning: 'none' },
    });
    expect(Object.keys(resourcesOf(file.template, 'AWS::Glue::Table'))).toEqual([]);
    const fnId = logicalIdOf(file, file.stack.pipeline.coordinator.publishFunction!);
    const statements = roleStatementsOf(file, fnId);
    expect(statements.flatMap(actionsOf).filter((a) => a.startsWith('glue:'))).toEqual([]);
    expect(JSON.stringify(statements)).toContain('/tables/orders/metadata/*');
    expect(environmentOf(file, fnId)).toMatchObject({
      EOS_ICEBERG_CATALOG: 'file',
      EOS_ICEBERG_TABLE_PREFIX: 'tables/orders',
      EOS_ICEBERG_PARTITIONING: 'none',
    });
    expect(environmentOf(file, fnId).EOS_ICEBERG_DATABASE).toBeUndefined();
  });

  it('grantReadTable: reads of the table prefix, the output it names and the Glue table; no write; none without the prop', () => {
    const stackWith = (props: Partial<ExactlyOncePipelineProps>) =>
      new ExactlyOncePipelineStack(testApp(), 'Reader', { pipeline: { ...BASE_PROPS, ...props } });
    const reader = stackWith(GLUE);
    const role = new iam.Role(reader, 'Analyst', { assumedBy: new iam.AccountRootPrincipal() });
    reader.pipeline.grantReadTable(role);
    const template = Template.fromStack(reader);
    const json = template.toJSON() as TemplateJson;
    const roleId = reader.getLogicalId(role.node.defaultChild as never);
    const statements = allStatements(template).filter((st) =>
      JSON.stringify(resourcesOf(template, 'AWS::IAM::Policy')[st.policy]!.Properties.Roles).includes(roleId),
    );
    const described = statements.map((st) => ({
      actions: [...actionsOf(st)].sort(),
      resources: resourcesOfStatement(st).map((r) => String(resolveIntrinsics(r, json))),
      condition: st.Condition,
    }));
    expect(described.flatMap((d) => d.actions).sort()).toEqual([
      'glue:GetDatabase',
      'glue:GetTable',
      's3:GetObject',
      's3:ListBucket',
    ]);
    const objects = described.find((d) => d.actions.includes('s3:GetObject'))!;
    expect(objects.resources.map((r) => r.slice(r.indexOf('/orders/') + 1))).toEqual([
      'orders/iceberg/output/*',
      'orders/final/output/*',
    ]);
    expect(described.find((d) => d.actions.includes('s3:ListBucket'))!.condition).toEqual({
      StringLike: { 's3:prefix': ['orders/iceberg/output/*', 'orders/final/output/*'] },
    });
    const catalog = described.find((d) => d.actions.includes('glue:GetTable'))!;
    expect(catalog.resources.map((r) => r.replace(/^arn:[^:]+:glue:[^:]*:[^:]*:/, ''))).toEqual([
      'catalog',
      'database/eos_orders_iceberg',
      'table/eos_orders_iceberg/output',
    ]);
    const without = stackWith(PARQUET);
    const other = new iam.Role(without, 'Analyst', { assumedBy: new iam.AccountRootPrincipal() });
    expect(() => without.pipeline.grantReadTable(other)).toThrow(
      /invalid setting iceberg: grantReadTable needs/,
    );
  });

  it('leaves cdk-nag nothing unacknowledged', () => {
    for (const props of [
      GLUE,
      { ...PARQUET, encryption: 'kms' as const, iceberg: { catalog: 'file' as const } },
    ]) {
      const { stack } = synthesize(props, { nag: true });
      expect(unacknowledgedNagFindings(stack)).toEqual([]);
    }
  });

  it('refuses in one line naming the field: S3 Tables (pointing to glue), NDJSON output, overlapping prefixes, misplaced or unknown fields', () => {
    const s3tables = refusal({ ...PARQUET, iceberg: { catalog: 's3tables' } });
    expect(s3tables.setting).toBe('iceberg.catalog');
    expect(s3tables.message).toMatch(/table bucket.*sink bucket.*use 'glue'/);
    expect(s3tables.message).not.toContain('\n');
    expect(refusal({ iceberg: { catalog: 'glue' } }).message).toMatch(/needs outputFormat 'parquet'/);
    expect(refusal({ ...PARQUET, iceberg: { catalog: 'file', tablePrefix: 'orders/final/t' } }).setting).toBe(
      'iceberg.tablePrefix',
    );
    expect(refusal({ ...PARQUET, iceberg: { catalog: 'file', tablePrefix: 'orders' } }).setting).toBe(
      'iceberg.tablePrefix',
    );
    expect(refusal({ ...PARQUET, iceberg: { catalog: 'file', databaseName: 'x' } }).setting).toBe(
      'iceberg.databaseName',
    );
    expect(refusal({ ...PARQUET, iceberg: { catalog: 'glue', tableName: 'Orders' } }).setting).toBe(
      'iceberg.tableName',
    );
    const unknown = refusal({
      ...PARQUET,
      iceberg: { catalog: 'glue', table: 'x' } as unknown as ExactlyOncePipelineProps['iceberg'],
    });
    expect(unknown.setting).toBe('iceberg.table');
    expect(
      refusal({
        ...PARQUET,
        iceberg: { catalog: 'hive' } as unknown as ExactlyOncePipelineProps['iceberg'],
      }).setting,
    ).toBe('iceberg.catalog');
  });
});
