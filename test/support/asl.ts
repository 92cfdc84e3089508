/**
 * The deployed definition, for the state machine tests: synthesizes a small stack with the real
 * `CheckpointCoordinator` construct (bundling skipped), takes the state machine's `DefinitionString` and
 * `DefinitionSubstitutions` from the template, resolves the intrinsics CDK emits with a fixed account and region,
 * and maps each Lambda ARN back to its coordinator step through the function's logical id.
 */
import { App, Stack } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import type { CfnFunction } from 'aws-cdk-lib/aws-lambda';
import * as s3 from 'aws-cdk-lib/aws-s3';
import {
  CheckpointCoordinator,
  type CheckpointCoordinatorProps,
} from '../../infra/checkpoint-coordinator.ts';
import { COORDINATOR_STEPS, type CoordinatorStep } from '../../shared/coordinator/definition.ts';

export const ACCOUNT = '123456789012';
export const REGION = 'us-east-1';

type Template = { Resources: Record<string, { Type: string; Properties?: Record<string, unknown> }> };

export interface SynthesizedCoordinator {
  readonly template: Template;
  readonly construct: CheckpointCoordinator;
  readonly stack: Stack;
  /**
   * The definition the schedule starts, as deployed (intrinsics and substitutions resolved): the Express one, or
   * the Standard one with `workflow: 'standard'`.
   */
  readonly definition: Record<string, unknown>;
  /** The Standard state machine's definition, as deployed. */
  readonly standardDefinition: Record<string, unknown>;
  /** Lambda ARN → the step whose handler that function runs. */
  readonly functionSteps: Record<string, CoordinatorStep>;
  /** What `createLocalCoordinator` takes to run the deployed workflows: the scheduled one, and its hand-off. */
  readonly runOptions: {
    readonly definition: Record<string, unknown>;
    readonly functionSteps: Record<string, CoordinatorStep>;
    readonly handOffDefinition?: Record<string, unknown>;
  };
}

function arnOf(logicalId: string): string {
  return `arn:aws:lambda:${REGION}:${ACCOUNT}:function:${logicalId}`;
}

/** Resolves Ref, Fn::GetAtt, Fn::Join, Fn::Select, Fn::Split and Fn::Sub with fixed pseudo parameters. */
export function resolveIntrinsics(value: unknown, template: Template): unknown {
  if (Array.isArray(value)) return value.map((v) => resolveIntrinsics(v, template));
  if (typeof value !== 'object' || value === null) return value;
  const object = value as Record<string, unknown>;
  const [name] = Object.keys(object);
  const arg = name ? object[name] : undefined;
  const pseudo: Record<string, string> = {
    'AWS::AccountId': ACCOUNT,
    'AWS::Region': REGION,
    'AWS::Partition': 'aws',
    'AWS::URLSuffix': 'amazonaws.com',
  };
  const ref = (id: string): string =>
    pseudo[id] ?? (template.Resources[id]?.Type === 'AWS::Lambda::Function' ? id : `ref-${id}`);
  switch (name) {
    case 'Ref':
      return ref(arg as string);
    case 'Fn::GetAtt': {
      const [id, attribute] = arg as [string, string];
      if (attribute === 'Arn' && template.Resources[id]?.Type === 'AWS::Lambda::Function') return arnOf(id);
      return `arn:aws:unknown:${REGION}:${ACCOUNT}:${id}/${attribute}`;
    }
    case 'Fn::Join': {
      const [separator, parts] = arg as [string, unknown[]];
      return parts.map((part) => String(resolveIntrinsics(part, template))).join(separator);
    }
    case 'Fn::Select': {
      const [index, list] = arg as [number, unknown];
      return (resolveIntrinsics(list, template) as unknown[])[Number(index)];
    }
    case 'Fn::Split': {
      const [separator, source] = arg as [string, unknown];
      return String(resolveIntrinsics(source, template)).split(separator);
    }
    case 'Fn::Sub': {
      const [text, vars] = (typeof arg === 'string' ? [arg, {}] : arg) as [string, Record<string, unknown>];
      return text.replace(/\$\{([^}]+)\}/g, (_, key: string) =>
        key in vars ? String(resolveIntrinsics(vars[key], template)) : ref(key),
      );
    }
    default:
      return Object.fromEntries(Object.entries(object).map(([k, v]) => [k, resolveIntrinsics(v, template)]));
  }
}

/** Synthesizes a test stack around the construct and returns the deployed definition. */
export function synthesizeCoordinator(
  props: Partial<CheckpointCoordinatorProps> = {},
): SynthesizedCoordinator {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] }, builtinCloudFormationValidation: false });
  const stack = new Stack(app, 'CoordinatorTest', { env: { account: ACCOUNT, region: REGION } });
  const table =
    props.table ??
    new dynamodb.Table(stack, 'Ledger', {
      partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
    });
  const bucket = props.bucket ?? new s3.Bucket(stack, 'Sink');
  const construct = new CheckpointCoordinator(stack, 'Coordinator', {
    table,
    bucket,
    environment: { EOS_PIPELINE_ID: 'orders', EOS_LEDGER_TABLE: 'ledger', EOS_BUCKET: 'sink' },
    ...props,
  });
  const template = app.synth().getStackByName(stack.stackName).template as Template;
  const machines = Object.values(template.Resources).filter(
    (r) => r.Type === 'AWS::StepFunctions::StateMachine',
  );
  const express = machines.filter((m) => m.Properties?.StateMachineType === 'EXPRESS');
  const standard = machines.filter((m) => m.Properties?.StateMachineType !== 'EXPRESS');
  if (standard.length !== 1 || express.length > 1) {
    throw new Error(`expected one Standard state machine and at most one Express, found ${machines.length}`);
  }
  const functionSteps: Record<string, CoordinatorStep> = {};
  for (const step of COORDINATOR_STEPS) {
    const logicalId = stack.getLogicalId(construct.functions[step].node.defaultChild as CfnFunction);
    functionSteps[arnOf(logicalId)] = step;
  }
  const standardDefinition = deployedDefinition(standard[0]!, template);
  const expressDefinition = express[0] && deployedDefinition(express[0], template);
  const definition = expressDefinition ?? standardDefinition;
  return {
    template,
    construct,
    stack,
    definition,
    standardDefinition,
    functionSteps,
    runOptions: {
      definition,
      functionSteps,
      ...(expressDefinition ? { handOffDefinition: standardDefinition } : {}),
    },
  };
}

/** A state machine's definition as deployed: intrinsics and substitutions resolved. */
function deployedDefinition(
  machine: Template['Resources'][string],
  template: Template,
): Record<string, unknown> {
  const properties = machine.Properties!;
  const text = String(resolveIntrinsics(properties.DefinitionString, template));
  const substitutions = resolveIntrinsics(properties.DefinitionSubstitutions ?? {}, template) as Record<
    string,
    string
  >;
  const substituted = text.replace(
    /\$\{([A-Za-z0-9_]+)\}/g,
    (whole, key: string) => substitutions[key] ?? whole,
  );
  return JSON.parse(substituted);
}
