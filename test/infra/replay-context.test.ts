/**
 * The replay mapping from CDK context (`-c replayGeneration=N`, `-c replayStartingPosition=…`,
 * `-c replayStartingPositionTimestamp=…`): the repository's app passes them to the construct's `replay` prop, so
 * the synthesized stack has a second processor with `EOS_REPLAY_GENERATION` behind a second mapping under
 * `<group>-replay-g<N>`; a bad value stops the synth naming the key; without the keys there is no replay function
 * or mapping. The app itself (`infra/app.ts`, context through CDK_CONTEXT_JSON as the CLI passes it) runs once for
 * a replay and once for a bad key; the other cases build the stack in process from the same context.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { REPLAY_CONTEXT_KEYS } from '../../infra/config.ts';
import { REPLAY_GENERATION_ENV } from '../../infra/replay.ts';
import { ExactlyOncePipelineStack, replayContext } from '../../infra/stack.ts';
import { renderConfigurationPage } from '../../scripts/docs-configuration.ts';
import { CLUSTER_ARN, resourcesOf, testApp } from '../support/infra.ts';
import { appSynthesizer } from '../support/synth-app.ts';

const BASE = { mskClusterArn: CLUSTER_ARN, mskVpcId: 'vpc-0123456789abcdef0', topic: 'orders' };

interface TemplateJson {
  Resources: Record<string, { Type: string; Properties?: Record<string, unknown> }>;
}

/** Each function's `EOS_REPLAY_GENERATION` (undefined when unset), by logical id. */
function replayGenerations(template: TemplateJson): Record<string, unknown> {
  const generations: Record<string, unknown> = {};
  for (const [id, resource] of Object.entries(template.Resources)) {
    if (resource.Type !== 'AWS::Lambda::Function') continue;
    const variables = (
      resource.Properties?.Environment as { Variables?: Record<string, unknown> } | undefined
    )?.Variables;
    generations[id] = variables?.[REPLAY_GENERATION_ENV];
  }
  return generations;
}

interface Mapping {
  readonly group: unknown;
  readonly functionId: unknown;
  readonly startingPosition: unknown;
  readonly startingPositionTimestamp: unknown;
}

function mappings(template: TemplateJson): Mapping[] {
  return Object.values(template.Resources)
    .filter((resource) => resource.Type === 'AWS::Lambda::EventSourceMapping')
    .map(({ Properties: p = {} }) => ({
      group: (p.AmazonManagedKafkaEventSourceConfig as { ConsumerGroupId?: unknown } | undefined)
        ?.ConsumerGroupId,
      functionId: (p.FunctionName as { Ref?: unknown }).Ref,
      startingPosition: p.StartingPosition,
      startingPositionTimestamp: p.StartingPositionTimestamp,
    }))
    .sort((a, b) => String(a.group).localeCompare(String(b.group)));
}

/** The processors that carry a replay generation, as `[logical id, generation]`. */
function replayFunctions(template: TemplateJson): [string, unknown][] {
  return Object.entries(replayGenerations(template)).filter(([, generation]) => generation !== undefined);
}

function stackFrom(context: Record<string, unknown>): TemplateJson {
  const stack = new ExactlyOncePipelineStack(testApp({ ...BASE, ...context }), 'FromContext');
  return Template.fromStack(stack).toJSON() as TemplateJson;
}

function stackError(context: Record<string, unknown>): string {
  try {
    new ExactlyOncePipelineStack(testApp({ ...BASE, ...context }), 'Bad');
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error(`no error for ${JSON.stringify(context)}`);
}

const { outdir, synth: synthApp } = appSynthesizer('eos-replay-synth-');

describe('infra/app.ts with -c replayGeneration', () => {
  it('deploys the replay processor and its mapping under <group>-replay-g<N>, and passes cdk-nag', () => {
    const result = synthApp({
      ...BASE,
      pipelineId: 'payments',
      replayGeneration: '3',
      replayStartingPosition: 'AT_TIMESTAMP',
      replayStartingPositionTimestamp: '1767225600',
    });
    expect(result.stderr).not.toMatch(/AwsSolutions-/);
    expect(result.status).toBe(0);
    const template = JSON.parse(
      readFileSync(join(outdir, 'ExactlyOncePipeline-payments.template.json'), 'utf8'),
    ) as TemplateJson;
    const replay = replayFunctions(template);
    expect(replay.map(([, generation]) => generation)).toEqual(['3']);
    const live = mappings(template).find((m) => m.group === 'eos-payments');
    const replayMapping = mappings(template).find((m) => m.group === 'eos-payments-replay-g3');
    expect(mappings(template)).toHaveLength(2);
    expect(replayMapping).toEqual({
      group: 'eos-payments-replay-g3',
      functionId: replay[0]![0],
      startingPosition: 'AT_TIMESTAMP',
      startingPositionTimestamp: 1767225600,
    });
    // The live mapping is untouched: its own group and position, into the processor without a generation.
    expect(live?.startingPosition).toBe('TRIM_HORIZON');
    expect(live?.functionId).not.toBe(replay[0]![0]);
    expect(replayGenerations(template)[String(live?.functionId)]).toBeUndefined();
  });

  it('stops on a bad replay key with one line naming it', () => {
    const result = synthApp({ ...BASE, replayGeneration: '0' });
    expect(result.status).toBe(1);
    expect(result.stderr.trim()).toBe(
      'invalid setting -c replayGeneration: an integer from 1 to 999999999 (got "0")',
    );
  });
});

describe('the stack from replay context', () => {
  it('adds no replay function or mapping without the keys (or with them empty)', () => {
    for (const context of [{}, { replayGeneration: '' }]) {
      const template = stackFrom(context);
      expect(replayFunctions(template)).toEqual([]);
      expect(mappings(template).map((m) => m.group)).toEqual(['eos-orders']);
      expect(JSON.stringify(template)).not.toContain('replay-g');
    }
    expect(replayContext(new ExactlyOncePipelineStack(testApp(BASE), 'Plain'))).toEqual({});
  });

  it('starts from TRIM_HORIZON by default, under the group derived from consumerGroupId', () => {
    const template = stackFrom({ replayGeneration: 2, consumerGroupId: 'orders-sink' });
    expect(replayFunctions(template).map(([, generation]) => generation)).toEqual(['2']);
    expect(mappings(template).map(({ group, startingPosition }) => [group, startingPosition])).toEqual([
      ['orders-sink', 'TRIM_HORIZON'],
      ['orders-sink-replay-g2', 'TRIM_HORIZON'],
    ]);
  });

  it('takes an ISO 8601 time with its zone, as startingPositionTimestamp does', () => {
    const template = stackFrom({
      replayGeneration: '5',
      replayStartingPosition: 'AT_TIMESTAMP',
      replayStartingPositionTimestamp: '2026-01-01T00:00:00Z',
    });
    const replay = mappings(template).find((m) => m.group === 'eos-orders-replay-g5');
    expect(replay?.startingPositionTimestamp).toBe(1767225600);
  });

  it('with -c eventSourceMapping=false: the replay processor, no mapping', () => {
    const template = stackFrom({ replayGeneration: '4', eventSourceMapping: 'false' });
    expect(replayFunctions(template).map(([, generation]) => generation)).toEqual(['4']);
    expect(resourcesOf(Template.fromJSON(template), 'AWS::Lambda::EventSourceMapping')).toEqual({});
  });

  it.each([
    [{ replayGeneration: '0' }, '-c replayGeneration: an integer from 1 to 999999999 (got "0")'],
    [
      { replayGeneration: '1000000000' },
      '-c replayGeneration: an integer from 1 to 999999999 (got "1000000000")',
    ],
    [{ replayGeneration: '2.5' }, '-c replayGeneration: an integer from 1 to 999999999 (got "2.5")'],
    [{ replayGeneration: 'two' }, '-c replayGeneration: an integer from 1 to 999999999 (got "two")'],
    [{ replayGeneration: true }, '-c replayGeneration: an integer from 1 to 999999999'],
    [
      { replayGeneration: '2', replayStartingPosition: 'LATEST' },
      '-c replayStartingPosition: Invalid option: expected one of "TRIM_HORIZON"|"AT_TIMESTAMP" (got "LATEST")',
    ],
    [
      { replayGeneration: '2', replayStartingPosition: 'AT_TIMESTAMP' },
      '-c replayStartingPositionTimestamp: required with replayStartingPosition AT_TIMESTAMP',
    ],
    [
      { replayGeneration: '2', replayStartingPositionTimestamp: '1767225600' },
      '-c replayStartingPositionTimestamp: only used with replayStartingPosition AT_TIMESTAMP (not TRIM_HORIZON, the default)',
    ],
    [
      {
        replayGeneration: '2',
        replayStartingPosition: 'AT_TIMESTAMP',
        replayStartingPositionTimestamp: 'today',
      },
      '-c replayStartingPositionTimestamp: an ISO 8601 time with zone (…Z) or whole Unix seconds (got "today")',
    ],
    [
      {
        replayGeneration: '2',
        replayStartingPosition: 'AT_TIMESTAMP',
        replayStartingPositionTimestamp: '1767225600000',
      },
      '-c replayStartingPositionTimestamp: whole Unix seconds (got 1767225600000: milliseconds?)',
    ],
    [
      { replayStartingPosition: 'AT_TIMESTAMP' },
      '-c replayStartingPosition: only used with replayGeneration',
    ],
    [
      { replayStartingPositionTimestamp: '1767225600' },
      '-c replayStartingPositionTimestamp: only used with replayGeneration',
    ],
    [
      { replayGeneration: '2', deliveryGuarantee: 'at-least-once' },
      "-c replayGeneration: needs deliveryGuarantee 'exactly-once' (got 'at-least-once')",
    ],
    [{ replayGeneration: '2', consumerGroupId: 'g'.repeat(195) }, '-c replayGeneration: its consumer group'],
    [{ replaygeneration: '2' }, '-c replaygeneration: unknown setting (did you mean replayGeneration?)'],
  ])('refuses %j naming the key', (context, message) => {
    expect(stackError(context)).toContain(`invalid setting ${message}`);
  });
});

describe('docs/configuration.md', () => {
  it('documents every replay context key with the replay field it sets', async () => {
    const page = await renderConfigurationPage();
    expect(page).toContain('`-c replayGeneration` / `replay.generation`');
    expect(page).toContain('`-c replayStartingPosition` / `replay.startingPosition`');
    expect(page).toContain('`-c replayStartingPositionTimestamp` / `replay.startingPositionTimestamp`');
    for (const key of REPLAY_CONTEXT_KEYS) expect(page).toContain(`\`-c ${key}\``);
  });
});
