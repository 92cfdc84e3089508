/**
 * The deployed definition of a stack with the `iceberg` prop, run: the state machine as synthesized (its Publish and
 * CatchUpPublish steps included, intrinsics and substitutions resolved) runs in the local interpreter against the
 * local parts, and every S3 and DynamoDB call each step makes is allowed by the role the template gives that
 * step's function. A checkpoint is committed and published; a publish that fails goes on to cleanup and the next
 * idle execution catches it up through CatchUpPublish.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import {
  COORDINATOR_STEPS,
  type CoordinatorTask,
  PUBLISH_STEP,
} from '../../shared/coordinator/definition.ts';
import { publishedTable } from '../../shared/coordinator/publish/target.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { ACCOUNT, REGION, resolveIntrinsics } from '../support/asl.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { type Call, isAllowed, recordCalls, roleStatements } from '../support/iam.ts';
import { resourcesOf, synthesize } from '../support/infra.ts';
import { PUBLISH_COLUMNS } from '../support/publish.ts';
import { stageFiles } from '../support/staging.ts';

type TemplateJson = Parameters<typeof roleStatements>[0];

const deployed = synthesize({
  outputFormat: 'parquet',
  timePartitioning: 'hour',
  iceberg: { catalog: 'file' },
});
const template = deployed.template.toJSON() as TemplateJson;
const coordinator = deployed.stack.pipeline.coordinator;
const functionIds: Record<CoordinatorTask, string> = Object.fromEntries([
  ...COORDINATOR_STEPS.map((step) => [
    step,
    deployed.stack.getLogicalId(coordinator.functions[step].node.defaultChild as never),
  ]),
  [PUBLISH_STEP, deployed.stack.getLogicalId(coordinator.publishFunction!.node.defaultChild as never)],
]) as Record<CoordinatorTask, string>;

/** The state machine's definition as deployed, each Lambda ARN as `resolveIntrinsics` spells it. */
function deployedDefinition(): Record<string, unknown> {
  const machine = Object.values(resourcesOf(deployed.template, 'AWS::StepFunctions::StateMachine'))[0]!;
  const text = String(resolveIntrinsics(machine.Properties.DefinitionString, template));
  const substitutions = resolveIntrinsics(machine.Properties.DefinitionSubstitutions, template) as Record<
    string,
    string
  >;
  return JSON.parse(
    text.replace(/\$\{([A-Za-z0-9_]+)\}/g, (whole, key: string) => substitutions[key] ?? whole),
  );
}

let res: TestResources;
let settings: Settings;
let catalog: FileCatalog;
const calls: { step: CoordinatorTask; call: Call }[] = [];
const outcomes: string[] = [];
const executedPublishes: string[] = [];

beforeAll(async () => {
  res = await freshResources('iceberg-sm');
  settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: 'orders',
    outputFormat: 'parquet',
    timePartitioning: 'hour',
    outputColumns: PUBLISH_COLUMNS,
  });
  catalog = new FileCatalog(res.clients.s3, res.bucket, 'orders/iceberg/output');
  let current: CoordinatorTask | undefined;
  recordCalls(res.clients, (found) => {
    if (current) for (const call of found) calls.push({ step: current, call });
  });
  let failPublish = false;
  const local = createLocalCoordinator({
    settings,
    clients: res.clients,
    clock: new ManualClock(Date.now()),
    definition: deployedDefinition(),
    functionSteps: Object.fromEntries(
      Object.entries(functionIds).map(([step, id]) => [
        `arn:aws:lambda:${REGION}:${ACCOUNT}:function:${id}`,
        step,
      ]),
    ) as Record<string, CoordinatorTask>,
    publishTarget: {
      catalog,
      table: publishedTable({
        location: catalog.location,
        columns: PUBLISH_COLUMNS,
        timePartitioning: 'hour',
      }),
    },
    hooks: {
      beforeStep: (step) => {
        current = step;
      },
      beforePublish: (payload) => {
        current = PUBLISH_STEP;
        executedPublishes.push(JSON.stringify((payload as { checkpointId: number }).checkpointId));
        if (failPublish) throw new Error('the catalog is down');
      },
    },
  });
  // Only the steps' calls: staging between executions and the test's own reads are no step's.
  const run = async () => {
    const outcome = await local.runCheckpoint();
    current = undefined;
    return outcome.status;
  };
  const stage = async (first: number) => {
    const rows = (partition: number) =>
      [0, 1, 2].map((i) => ({
        n: partition * 1000 + first + i,
        at: Date.UTC(2026, 2, 14, 7) + first + i,
        source: { topic: 'orders', partition, offset: first + i },
      }));
    await stageFiles(res.clients, settings, [
      { partition: 0, firstOffset: first, lastOffset: first + 2, rows: rows(0) },
      { partition: 1, firstOffset: first, lastOffset: first + 2, rows: rows(1) },
    ]);
  };
  await stage(0);
  outcomes.push(await run()); // committed and published
  outcomes.push(await run()); // idle, nothing lags
  await stage(3);
  failPublish = true;
  outcomes.push(await run()); // committed, its publish failed
  failPublish = false;
  outcomes.push(await run()); // idle: catches checkpoint 2 up
  outcomes.push(await run()); // idle, nothing lags
}, 180_000);

describe('the deployed definition with an Iceberg table', () => {
  it('commits and publishes, and catches a failed publish up on an idle execution', async () => {
    expect(outcomes).toEqual(['committed', 'empty', 'committed', 'empty', 'empty']);
    // After commit 1, after commit 2 (failed), and the catch-up of 2: none on the idle executions with nothing behind.
    expect(executedPublishes).toEqual(['1', '2', '2']);
    const state = await catalog.load();
    expect(state?.metadata.snapshots).toHaveLength(2);
  });

  it("allows every call of every step, the publish step's included, by its own role", () => {
    expect(new Set(calls.map((c) => c.step))).toContain(PUBLISH_STEP);
    const denied = calls.filter(
      ({ step, call }) => !isAllowed(template, roleStatements(template, functionIds[step]), call),
    );
    expect(
      denied.map(({ step, call }) => `${step} ${call.action} ${call.target} ${call.leadingKeys}`),
    ).toEqual([]);
  });
});
