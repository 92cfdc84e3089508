/**
 * The local setup matches the stack: the table the local parts create (from the shared layout) has the deployed
 * table's keys, billing and TTL; the bucket prefixes the code writes under are exactly the ones the deployed IAM
 * policies and lifecycle rule name; the state machine the full stack deploys is the definition the local runner
 * and the state machine tests execute.
 */
import { createRequire } from 'node:module';
import { DescribeTableCommand, DescribeTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import type { CfnFunction } from 'aws-cdk-lib/aws-lambda';
import { beforeAll, describe, expect, it } from 'vitest';
import { STEP_TASK_TIMEOUT_MARGIN_SECONDS } from '../../infra/config.ts';
import { LOCAL_STANDARD_ARN, localDefinition } from '../../local/coordinator-runner.ts';
import { createLedgerTable } from '../../local/provision.ts';
import {
  buildCoordinatorDefinition,
  COORDINATOR_STEPS,
  type CoordinatorStep,
  EXPRESS_TIMEOUT_SECONDS,
  functionArnSubstitution,
  STANDARD_STATE_MACHINE_SUBSTITUTION,
  WORKFLOWS,
  type Workflow,
} from '../../shared/coordinator/definition.ts';
import { planKey } from '../../shared/coordinator/work-objects.ts';
import { finalObjectKey, manifestKey, type ObjectRange, stagedObjectKey } from '../../shared/sink/layout.ts';
import { resolveIntrinsics, synthesizeCoordinator } from '../support/asl.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { actionsOf, allStatements, resourcesOf, resourcesOfStatement, synthesize } from '../support/infra.ts';

// asl-validator ships no type declarations: load it through require with the one signature used here.
const aslValidator = createRequire(import.meta.url)('asl-validator') as (definition: unknown) => {
  isValid: boolean;
  errorsText: () => string;
};

const { stack, template } = synthesize();
const pipeline = stack.pipeline;
const templateJson = template.toJSON() as Parameters<typeof resolveIntrinsics>[1];

let resources: TestResources;
beforeAll(async () => {
  resources = await freshResources('infra-local');
});

describe('the ledger table', () => {
  it('created locally from the layout has the deployed keys, billing mode and TTL attribute', async () => {
    const name = uniqueName('layout');
    await createLedgerTable(resources.clients.dynamodb, name);
    const { Table } = await resources.clients.dynamodb.send(new DescribeTableCommand({ TableName: name }));
    const ttl = await resources.clients.dynamodb.send(new DescribeTimeToLiveCommand({ TableName: name }));
    const deployed = Object.values(resourcesOf(template, 'AWS::DynamoDB::Table'))[0]!.Properties;

    const byName = <T extends { AttributeName?: string }>(list: T[] | undefined) =>
      [...(list ?? [])].sort((a, b) => String(a.AttributeName).localeCompare(String(b.AttributeName)));
    expect(byName(Table?.KeySchema)).toEqual(byName(deployed.KeySchema as never));
    expect(byName(Table?.AttributeDefinitions)).toEqual(byName(deployed.AttributeDefinitions as never));
    expect(Table?.BillingModeSummary?.BillingMode).toBe(deployed.BillingMode);
    expect(ttl.TimeToLiveDescription?.AttributeName).toBe(
      (deployed.TimeToLiveSpecification as { AttributeName: string }).AttributeName,
    );
  });
});

describe('the bucket prefixes', () => {
  const range: ObjectRange = {
    stream: 'output',
    topic: 'orders',
    partition: 3,
    firstOffset: 100,
    lastOffset: 199,
  };
  const keys = {
    staged: stagedObjectKey('orders', range, 'attempt-1', true),
    final: finalObjectKey('orders', range, true),
    manifest: manifestKey('orders', 7),
    plan: planKey('orders', 7, 1, 0, 'a'.repeat(64)),
  };

  /** The object-key patterns a function may call `action` on, with the bucket ARN token resolved away. */
  function objectPatterns(fn: { node: { defaultChild?: unknown } } & object, action: string): RegExp[] {
    const role = (fn as { role?: { node: { findChild(id: string): { node: { defaultChild?: unknown } } } } })
      .role;
    const policyId = stack.getLogicalId(role!.node.findChild('DefaultPolicy').node.defaultChild as never);
    return allStatements(template)
      .filter((s) => s.policy === policyId && actionsOf(s).includes(action))
      .flatMap(resourcesOfStatement)
      .map((resource) => String(resolveIntrinsics(resource, templateJson)))
      .map((arn) => arn.replace(/^arn:aws:unknown:[^/]+\/Arn\//, ''))
      .map((glob) => new RegExp(`^${glob.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*')}$`));
  }
  const may = (patterns: RegExp[], key: string) => patterns.some((pattern) => pattern.test(key));

  it('let the processor stage exactly-once output but never write final objects or manifests', () => {
    const put = objectPatterns(pipeline.processor, 's3:PutObject');
    expect(may(put, keys.staged)).toBe(true);
    expect(may(put, keys.final)).toBe(false);
    expect(may(put, keys.manifest)).toBe(false);
  });

  it('let promote write final objects, commit write manifests, and no step delete a final object', () => {
    const steps = pipeline.coordinator.functions;
    expect(may(objectPatterns(steps.promote, 's3:PutObject'), keys.final)).toBe(true);
    expect(may(objectPatterns(steps.commit, 's3:PutObject'), keys.manifest)).toBe(true);
    expect(may(objectPatterns(steps.prepare, 's3:PutObject'), keys.plan)).toBe(true);
    // Promote copies from the candidates prepare wrote under the coordinator's prefix, never from staged objects
    // (the processor could still rewrite those): it has no access to the staged prefix at all.
    expect(may(objectPatterns(steps.prepare, 's3:GetObject'), keys.staged)).toBe(true);
    expect(may(objectPatterns(steps.promote, 's3:GetObject'), keys.staged)).toBe(false);
    for (const step of COORDINATOR_STEPS) {
      const del = objectPatterns(steps[step], 's3:DeleteObject');
      expect(may(del, keys.final), step).toBe(false);
      expect(may(del, keys.manifest), step).toBe(false);
    }
    expect(may(objectPatterns(steps.cleanup, 's3:DeleteObject'), keys.staged)).toBe(true);
  });

  it('put staged objects and checkpoint work objects, and nothing committed, under the lifecycle backstop', () => {
    const bucket = Object.values(resourcesOf(template, 'AWS::S3::Bucket')).find(
      (b) => b.Properties.VersioningConfiguration,
    )!;
    const rules = (
      bucket.Properties.LifecycleConfiguration as {
        Rules: Array<{ Prefix?: string; ExpirationInDays?: number }>;
      }
    ).Rules;
    const expiring = rules.filter((rule) => rule.ExpirationInDays !== undefined).map((rule) => rule.Prefix!);
    const expires = (key: string) => expiring.some((prefix) => key.startsWith(prefix));
    expect(expires(keys.staged)).toBe(true);
    expect(expires(keys.plan)).toBe(true);
    expect(expires(keys.final)).toBe(false);
    expect(expires(keys.manifest)).toBe(false);
  });
});

describe('the state machine', () => {
  const machines = Object.values(resourcesOf(template, 'AWS::StepFunctions::StateMachine')).map(
    (m) => m.Properties,
  );
  const machineOf = (workflow: Workflow) =>
    machines.find((m) => (m.StateMachineType === 'EXPRESS') === (workflow === 'express'))!;

  /** A deployed definition with each function's ARN turned back into its `${…FunctionArn}` placeholder. */
  function deployedWithPlaceholders(workflow: Workflow = 'standard'): Record<string, unknown> {
    const machine = machineOf(workflow);
    const text = String(resolveIntrinsics(machine.DefinitionString, templateJson));
    const substitutions = resolveIntrinsics(machine.DefinitionSubstitutions, templateJson) as Record<
      string,
      string
    >;
    const arnToPlaceholder = new Map<string, string>();
    for (const step of COORDINATOR_STEPS) {
      const arn = substitutions[functionArnSubstitution(step)]!;
      const logicalId = stack.getLogicalId(
        pipeline.coordinator.functions[step].node.defaultChild as CfnFunction,
      );
      expect(arn, step).toContain(logicalId); // each substitution points at that step's own function
      arnToPlaceholder.set(arn, `\${${functionArnSubstitution(step)}}`);
    }
    const substituted = text.replace(
      /\$\{([A-Za-z0-9_]+)\}/g,
      (whole, key: string) => substitutions[key] ?? whole,
    );
    let json = substituted;
    for (const [arn, placeholder] of arnToPlaceholder) json = json.split(arn).join(placeholder);
    // The Express one names the Standard one it hands off to: back to its placeholder too.
    const standardArn = substitutions[STANDARD_STATE_MACHINE_SUBSTITUTION];
    if (standardArn) json = json.split(standardArn).join(`\${${STANDARD_STATE_MACHINE_SUBSTITUTION}}`);
    return JSON.parse(json);
  }

  it("is the pure definition builder's output with the stack's step timeouts, for each workflow", () => {
    const stepTimeout = pipeline.config.coordinatorStepTimeoutSeconds;
    expect(machines).toHaveLength(2);
    expect(deployedWithPlaceholders('standard')).toEqual(
      buildCoordinatorDefinition({
        taskTimeoutSeconds: stepTimeout + STEP_TASK_TIMEOUT_MARGIN_SECONDS,
        executionTimeoutSeconds: 3600,
      }),
    );
    expect(deployedWithPlaceholders('express')).toEqual(
      buildCoordinatorDefinition({
        taskTimeoutSeconds: stepTimeout + STEP_TASK_TIMEOUT_MARGIN_SECONDS,
        executionTimeoutSeconds: EXPRESS_TIMEOUT_SECONDS,
        workflow: 'express',
      }),
    );
  });

  it('is the definition the state machine tests run (same construct, same settings) and valid ASL', async () => {
    const tested = synthesizeCoordinator({
      functionDefaults: { timeout: pipeline.coordinator.functions.begin.timeout },
    });
    const placeholders = (definition: Record<string, unknown>, arns: Record<string, CoordinatorStep>) => {
      let json = JSON.stringify(definition);
      for (const [arn, step] of Object.entries(arns))
        json = json.split(arn).join(`\${${functionArnSubstitution(step)}}`);
      return JSON.parse(json);
    };
    expect(placeholders(tested.standardDefinition, tested.functionSteps)).toEqual(deployedWithPlaceholders());
    expect(tested.runOptions.handOffDefinition).toBe(tested.standardDefinition);
    const express = placeholders(tested.definition, tested.functionSteps) as {
      States: Record<string, unknown>;
    };
    const deployedExpress = deployedWithPlaceholders('express') as typeof express;
    // The hand-off names the test stack's Standard machine there, the pipeline's here: the rest is the same.
    expect({ ...express.States, HandOff: undefined }).toEqual({
      ...deployedExpress.States,
      HandOff: undefined,
    });
    for (const workflow of WORKFLOWS) {
      const { isValid, errorsText } = aslValidator(deployedWithPlaceholders(workflow));
      expect(isValid, `${workflow}: ${errorsText()}`).toBe(true);
    }
  });

  it("differs from the local runner's definitions only in task timeouts", () => {
    for (const workflow of WORKFLOWS) expectLocalLikeDeployed(workflow);
  });

  function expectLocalLikeDeployed(workflow: Workflow): void {
    const local = localDefinition({ workflow });
    const withoutTaskTimeouts = (value: unknown): unknown => {
      if (Array.isArray(value)) return value.map(withoutTaskTimeouts);
      if (typeof value !== 'object' || value === null) return value;
      const object = value as Record<string, unknown>;
      return Object.fromEntries(
        Object.entries(object)
          .filter(([key]) => !(object.Type === 'Task' && key === 'TimeoutSeconds'))
          .map(([key, v]) => [key, withoutTaskTimeouts(v)]),
      );
    };
    let json = JSON.stringify(local.definition);
    for (const [arn, step] of Object.entries(local.functionSteps))
      json = json.split(arn).join(`\${${functionArnSubstitution(step)}}`);
    json = json.split(LOCAL_STANDARD_ARN).join(`\${${STANDARD_STATE_MACHINE_SUBSTITUTION}}`);
    expect(withoutTaskTimeouts(JSON.parse(json))).toEqual(
      withoutTaskTimeouts(deployedWithPlaceholders(workflow)),
    );
  }
});
