/**
 * An idle pipeline publishing to an Iceberg table: a committed checkpoint whose publish failed after every retry
 * reaches the table once the catalog is back, though no later checkpoint comes to catch it up (begin answers
 * `publish` when the published mark is behind the last committed checkpoint, and the state machine's
 * CatchUpPublish publishes it). What it costs an idle execution when nothing lags, counted on the SDK clients; and
 * a definition without a table, byte for byte what it was. Against DynamoDB Local and the local S3 server, the
 * table read back by icebird.
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { createAwsClients, ledgerDocumentClient } from '../../shared/aws/clients.ts';
import {
  buildCoordinatorDefinition,
  CATCH_UP_PUBLISH_STATE_NAME,
  PUBLISH_STATE_NAME,
} from '../../shared/coordinator/definition.ts';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import type { Catalog } from '../../shared/iceberg/catalog.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { commitNext, type PublishSetup, publishSetup, rowsBack } from '../support/publish.ts';
import { stageFiles } from '../support/staging.ts';

// asl-validator ships no types: load it through require with the shape it documents.
const aslValidator = createRequire(import.meta.url)('asl-validator') as (definition: unknown) => {
  isValid: boolean;
  errorsText: () => string;
};

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubidle');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

const setup = (): PublishSetup => publishSetup(res, 'pi');

/** The setup's catalog, refusing every commit while `down()`, and counting its loads. */
function flakyCatalog(s: PublishSetup, down: () => boolean): { catalog: Catalog; loads: () => number } {
  let loads = 0;
  const catalog: Catalog = {
    load: () => {
      loads++;
      return s.catalog.load();
    },
    commit: async (expected, next) => {
      if (down()) throw new Error('the catalog is unavailable');
      return s.catalog.commit(expected, next);
    },
  };
  return { catalog, loads: () => loads };
}

async function stageThreeRows(s: PublishSetup): Promise<void> {
  await stageFiles(res.clients, s.settings, [
    {
      partition: 0,
      firstOffset: 0,
      lastOffset: 2,
      rows: [0, 1, 2].map((n) => ({ n, at: n, source: { topic: 'orders', partition: 0, offset: n } })),
    },
  ]);
}

const stepsOf = (outcome: { invocations: readonly { step: string }[] }) =>
  outcome.invocations.map((i) => i.step);

describe('a committed checkpoint whose publish failed reaches the table on an idle pipeline', () => {
  it('publishes a committed checkpoint whose publish failed, once the catalog is back, on an idle pipeline', async () => {
    const s = setup();
    let down = true;
    const flaky = flakyCatalog(s, () => down);
    const local = createLocalCoordinator({
      settings: s.settings,
      clients: res.clients,
      publishTarget: { ...s.parts.target, catalog: flaky.catalog },
    });
    await stageThreeRows(s);
    const first = await local.runCheckpoint();
    expect(first.status).toBe('committed');
    const publishes = first.invocations.filter((i) => i.step === 'publish');
    expect(publishes.length).toBeGreaterThan(0);
    expect(publishes.every((i) => i.failed)).toBe(true);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(0);
    down = false;
    const idle = [];
    for (let run = 0; run < 3; run++) idle.push(await local.runCheckpoint());
    expect(idle.map((outcome) => outcome.status)).toEqual(['empty', 'empty', 'empty']);
    // The first idle execution publishes; once the mark is at the committed checkpoint, begin alone runs.
    expect(idle.map(stepsOf)).toEqual([['begin', 'publish'], ['begin'], ['begin']]);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
    expect(await rowsBack(s.catalog)).toEqual([0, 1, 2]);
  });

  it('an idle publish that fails still ends the execution at NothingToCommit; the next idle one catches up', async () => {
    const s = setup();
    let down = true;
    const flaky = flakyCatalog(s, () => down);
    const local = createLocalCoordinator({
      settings: s.settings,
      clients: res.clients,
      publishTarget: { ...s.parts.target, catalog: flaky.catalog },
    });
    await stageThreeRows(s);
    expect((await local.runCheckpoint()).status).toBe('committed');
    const failing = await local.runCheckpoint();
    expect(failing.status).toBe('empty');
    expect(failing.invocations.map((i) => [i.step, i.failed])).toEqual([
      ['begin', false],
      ['publish', true],
    ]);
    expect(failing.output).toMatchObject({
      checkpoint: { action: 'publish', checkpointId: 1 },
      publishError: { Error: 'Error' },
    });
    expect((await s.parts.snapshots.readMark()).upTo).toBe(0);
    down = false;
    const caughtUp = await local.runCheckpoint();
    expect(caughtUp.status).toBe('empty');
    expect(caughtUp.invocations.map((i) => [i.step, i.failed])).toEqual([
      ['begin', false],
      ['publish', false],
    ]);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
    expect(await rowsBack(s.catalog)).toEqual([0, 1, 2]);
  });

  it('catches up every committed checkpoint the table lacks, in order, one snapshot each', async () => {
    const s = setup();
    // Three checkpoints committed by a state machine without a table: the table lacks all of them.
    for (let i = 0; i < 3; i++) await commitNext(res, s, 1);
    const local = createLocalCoordinator({
      settings: s.settings,
      clients: res.clients,
      publishTarget: s.parts.target,
    });
    const idle = await local.runCheckpoint();
    expect(idle.status).toBe('empty');
    expect(stepsOf(idle)).toEqual(['begin', 'publish']);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(3);
    const state = await s.catalog.load();
    expect(state?.metadata.snapshots.map((snapshot) => snapshot.summary['eos.checkpoint-id'])).toEqual([
      '1',
      '2',
      '3',
    ]);
    expect(await rowsBack(s.catalog)).toEqual([0, 1, 2, 1000, 1001, 1002]);
  });
});

describe("begin's answer on an idle pipeline", () => {
  it('is publish with the last committed checkpoint only when the state machine publishes and the mark is behind', async () => {
    const s = setup();
    for (let i = 0; i < 2; i++) await commitNext(res, s, 1);
    const core = createLocalCoordinator({ settings: s.settings, clients: res.clients }).coordinator;
    const lagging = { action: 'publish', checkpointId: 2, attempt: 1, shards: [] };
    expect(await core.begin({ execution: 'idle-1', publish: true })).toEqual(lagging);
    // A state machine without a table never asks: its begin answers as it always did.
    expect(await core.begin({ execution: 'idle-2' })).toMatchObject({ action: 'empty', checkpointId: 0 });
    await publishCheckpoint(s.parts, 1);
    expect(await core.begin({ execution: 'idle-3', publish: true })).toEqual(lagging);
    await publishCheckpoint(s.parts, 2);
    expect(await core.begin({ execution: 'idle-4', publish: true })).toMatchObject({ action: 'empty' });
  });
});

describe('an idle execution that cannot tell whether the table is behind', () => {
  it('ends at NothingToCommit, not failed, and says why in one error line', async () => {
    const s = setup();
    await commitNext(res, s);
    // A published mark whose snapshot id is not a number: reading it fails the same way every time.
    await ledgerDocumentClient(res.clients.dynamodb).send(
      new PutCommand({
        TableName: s.settings.ledgerTable,
        Item: { ...keys.publishedMark(s.settings.pipelineId), upTo: 1, snapshotId: 'x', sequenceNumber: 1 },
      }),
    );
    const errors: string[] = [];
    const local = createLocalCoordinator({
      settings: s.settings,
      clients: res.clients,
      publishTarget: s.parts.target,
      log: { info: () => {}, error: (message) => errors.push(message) },
    });
    const idle = await local.runCheckpoint();
    expect(idle.status).toBe('empty');
    expect(stepsOf(idle)).toEqual(['begin']);
    expect(errors).toEqual(['could not tell whether the Iceberg table is behind: nothing published']);
  });
});

describe('what an idle execution costs when nothing lags', () => {
  it('makes no publish invocation and loads no table: one GetItem of the mark more than without a table', async () => {
    const s = setup();
    await commitNext(res, s);
    await publishCheckpoint(s.parts, 1);
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const flaky = flakyCatalog(s, () => false);
    const publishing = createLocalCoordinator({
      settings: s.settings,
      clients,
      publishTarget: { ...s.parts.target, catalog: flaky.catalog },
    });
    const plain = createLocalCoordinator({ settings: s.settings, clients });

    const withTable = await publishing.runCheckpoint();
    const withTableCalls = calls.snapshot();
    calls.reset();
    const withoutTable = await plain.runCheckpoint();
    const withoutTableCalls = calls.snapshot();

    expect([withTable.status, withoutTable.status]).toEqual(['empty', 'empty']);
    expect(stepsOf(withTable)).toEqual(['begin']);
    expect(stepsOf(withoutTable)).toEqual(['begin']);
    expect(flaky.loads()).toBe(0);
    const getItem = Object.keys(withTableCalls).find((operation) => /^dynamodb:Get(Item)?$/.test(operation));
    expect(getItem).toBeDefined();
    expect(withTableCalls).toEqual({
      ...withoutTableCalls,
      [getItem!]: (withoutTableCalls[getItem!] ?? 0) + 1,
    });
  });

  it('before any checkpoint committed, an idle execution reads nothing more than without a table', async () => {
    const s = setup();
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const publishing = createLocalCoordinator({
      settings: s.settings,
      clients,
      publishTarget: s.parts.target,
    });
    const plain = createLocalCoordinator({ settings: s.settings, clients });
    expect(stepsOf(await publishing.runCheckpoint())).toEqual(['begin']);
    const withTableCalls = calls.snapshot();
    calls.reset();
    expect(stepsOf(await plain.runCheckpoint())).toEqual(['begin']);
    expect(withTableCalls).toEqual(calls.snapshot());
  });
});

type States = Record<string, Record<string, unknown>>;

describe('the definition with and without a table', () => {
  it('without a table is byte for byte what it was before the idle publish', () => {
    const plain = JSON.stringify(buildCoordinatorDefinition());
    expect(JSON.stringify(buildCoordinatorDefinition({ publish: false }))).toBe(plain);
    // The digest of the definition that deploys for a pipeline without a table: any change to it is deliberate.
    expect(createHash('sha256').update(plain).digest('hex')).toBe(
      'daa417e4f1670b71df8d96985fe0b47762e6dd5e7698e4e666214140fef7f60b',
    );
    expect(plain).not.toContain('publish');
    expect(plain).not.toContain(CATCH_UP_PUBLISH_STATE_NAME);
  });

  it('with a table differs only by the publish flag to Begin, the publish route and the two publish tasks', () => {
    const plain = buildCoordinatorDefinition() as { States: States };
    const publishing = buildCoordinatorDefinition({ publish: true }) as { States: States };
    // A copy of its own: the validator writes defaults into the definition it checks.
    const { isValid, errorsText } = aslValidator(buildCoordinatorDefinition({ publish: true }));
    expect(isValid, isValid ? '' : errorsText()).toBe(true);
    const states = publishing.States;
    expect(states.Begin?.Parameters).toMatchObject({
      Payload: {
        'execution.$': '$.execution',
        publish: true,
      },
    });
    const choices = (states.Route?.Choices ?? []) as unknown[];
    expect(choices.at(-1)).toEqual({
      Variable: '$.checkpoint.action',
      StringEquals: 'publish',
      Next: CATCH_UP_PUBLISH_STATE_NAME,
    });
    expect(states[CATCH_UP_PUBLISH_STATE_NAME]).toEqual({
      ...states[PUBLISH_STATE_NAME],
      Catch: [{ ErrorEquals: ['States.ALL'], ResultPath: '$.publishError', Next: 'NothingToCommit' }],
      Next: 'NothingToCommit',
    });
    const {
      [PUBLISH_STATE_NAME]: _publish,
      [CATCH_UP_PUBLISH_STATE_NAME]: _catchUp,
      Begin,
      Route,
      Commit,
      ...rest
    } = states;
    const { Begin: plainBegin, Route: plainRoute, Commit: plainCommit, ...plainRest } = plain.States;
    expect(rest).toEqual(plainRest);
    expect({ ...Begin, Parameters: plainBegin?.Parameters }).toEqual(plainBegin);
    expect({ ...Route, Choices: choices.slice(0, -1) }).toEqual(plainRoute);
    expect({ ...Commit, Next: 'Cleanup' }).toEqual(plainCommit);
  });
});
