/**
 * What an idle pipeline does every checkpoint interval, measured: one scheduled coordinator execution that finds
 * nothing to commit, and one monitor run. Plus what the stack bills by the month whatever the traffic: its alarms,
 * its dashboard and the custom metrics its functions emit. The cost model (`cost.ts`) turns these into the fixed
 * monthly cost of a pipeline that receives nothing.
 */
import '../local/polyfills.ts';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { ExactlyOncePipelineStack, PIPELINE_FEATURE_FLAGS } from '../infra/stack.ts';
import { createLocalCoordinator } from '../local/coordinator-runner.ts';
import { CallCounter } from '../shared/aws/call-counter.ts';
import { createAwsClients } from '../shared/aws/clients.ts';
import { systemClock } from '../shared/clock.ts';
import { parseSettings } from '../shared/config/settings.ts';
import type { Workflow } from '../shared/coordinator/definition.ts';
import { runMonitor } from '../shared/observability/monitor.ts';
import { METRIC, TABLE_ONLY_METRICS } from '../shared/observability/names.ts';
import { createTelemetry } from '../shared/observability/telemetry.ts';

export interface IdleRun {
  /** The execution's outcome: `empty` when the ledger held nothing to commit. */
  status: string;
  calls: Record<string, number>;
  transactionItems: number;
  lambdaInvocations: number;
  /** History events the interpreter logged. */
  historyEvents: number;
  /** State transitions (states entered and retried), what Step Functions bills. */
  transitions: number;
}

export interface IdleResult {
  /** The default schedule of the coordinator and of the monitor. */
  checkpointIntervalMinutes: number;
  emptyCheckpoint: IdleRun;
  /** One run over a ledger with nothing staged. */
  monitor: { calls: Record<string, number> };
  /** Counted in the synthesized default stack. */
  alarms: number;
  dashboards: number;
  /** Metric names × the one dimension set each is emitted with. */
  customMetrics: number;
  /** The default stack's batching and memory settings, for the cost model. */
  defaults: StackDefaults;
}

export interface StackDefaults {
  batchSize: number;
  maxBatchingWindowSeconds: number;
  checkpointIntervalMinutes: number;
  processorMemoryMb: number;
  coordinatorMemoryMb: number;
  monitorMemoryMb: number;
  /** The workflow the schedule starts. */
  coordinatorWorkflow: Workflow;
}

/** The memory of the stack's functions whose logical id contains `name` (the largest, if several). */
function memoryOf(template: Template, name: string): number {
  const sizes = Object.entries(template.findResources('AWS::Lambda::Function'))
    .filter(([id]) => id.includes(name))
    .map(([, resource]) =>
      Number((resource as { Properties?: { MemorySize?: unknown } }).Properties?.MemorySize),
    );
  const known = sizes.filter((size) => Number.isFinite(size));
  if (known.length === 0)
    throw new Error(`no Lambda function named like ${name} with a MemorySize in the stack`);
  return Math.max(...known);
}

/** The default stack's alarms and dashboards (bundling skipped: only the resources are counted). */
function countStackResources(): {
  alarms: number;
  dashboards: number;
  intervalMinutes: number;
  defaults: StackDefaults;
} {
  const app = new App({
    builtinCloudFormationValidation: false,
    context: { ...PIPELINE_FEATURE_FLAGS, 'aws:cdk:bundling-stacks': [] },
  });
  const stack = new ExactlyOncePipelineStack(app, 'Idle', {
    pipeline: {
      mskClusterArn:
        'arn:aws:kafka:us-east-1:111111111111:cluster/idle/00000000-0000-0000-0000-000000000000-1',
      mskVpcId: 'vpc-0123456789abcdef0',
      topic: 'orders',
    },
  });
  const template = Template.fromStack(stack);
  const count = (type: string) => Object.keys(template.findResources(type)).length;
  const config = stack.pipeline.config;
  return {
    alarms: count('AWS::CloudWatch::Alarm'),
    dashboards: count('AWS::CloudWatch::Dashboard'),
    intervalMinutes: config.checkpointIntervalMinutes,
    defaults: {
      batchSize: config.batchSize,
      maxBatchingWindowSeconds: config.maxBatchingWindowSeconds,
      checkpointIntervalMinutes: config.checkpointIntervalMinutes,
      processorMemoryMb: config.processorMemoryMb,
      coordinatorMemoryMb: memoryOf(template, 'Coordinator'),
      monitorMemoryMb: memoryOf(template, 'Monitor'),
      coordinatorWorkflow: config.coordinatorWorkflow,
    },
  };
}

export async function measureIdle(base: { table: string; bucket: string }): Promise<IdleResult> {
  const settings = parseSettings({
    ledgerTable: base.table,
    bucket: base.bucket,
    pipelineId: 'bench-idle',
    idempotencyKey: 'none',
  });
  const clients = createAwsClients();
  const calls = new CallCounter().attach(clients);
  const outcome = await createLocalCoordinator({ settings, clients }).runCheckpoint();
  const emptyCheckpoint: IdleRun = {
    status: outcome.status,
    calls: calls.snapshot(),
    transactionItems: calls.transactionItems(),
    lambdaInvocations: outcome.invocations.length,
    historyEvents: outcome.events,
    transitions: outcome.transitions,
  };

  const monitorCalls = new CallCounter().attach(clients);
  const telemetry = createTelemetry({ pipeline: settings.pipelineId, component: 'monitor' });
  await runMonitor({
    dynamodb: clients.dynamodb,
    table: settings.ledgerTable,
    pipeline: settings.pipelineId,
    clock: systemClock,
    telemetry,
  });
  const stack = countStackResources();
  process.stderr.write(
    `[bench] idle: an empty checkpoint ${outcome.status} in ${outcome.invocations.length} Lambda invocations, ` +
      `${outcome.events} history events; the monitor ${monitorCalls.total()} calls\n`,
  );
  return {
    checkpointIntervalMinutes: stack.intervalMinutes,
    emptyCheckpoint,
    monitor: { calls: monitorCalls.snapshot() },
    alarms: stack.alarms,
    dashboards: stack.dashboards,
    // The stack measured here has no Iceberg table.
    customMetrics: Object.values(METRIC).filter((name) => !TABLE_ONLY_METRICS.includes(name)).length,
    defaults: stack.defaults,
  };
}
