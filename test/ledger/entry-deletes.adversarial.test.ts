/**
 * Staged entries deleted in batches of conditional PartiQL deletes (`shared/ledger/entry-deletes.ts`, through the
 * ledger's `deleteEntries`) under hostile answers, against DynamoDB Local: statements refused one by one for
 * reasons other than their condition (throttled, a conflict, an internal error), some applied and some not;
 * responses missing; a whole call failing after DynamoDB applied part of it; the same item named twice; the
 * 25/26 boundary; an entry rewritten to name another object between the batch and its transactional fallback.
 * Whatever the answer, an entry goes only while it names the object asked for, nothing else is touched, every
 * entry asked for is decided or the call fails, and the container's refusal of PartiQL is set only by a refusal.
 * The IAM grant is checked against the calls the deletes make.
 */
import { DeleteCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import type { InitializeMiddleware, MetadataBearer, MiddlewareStack } from '@smithy/types';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { type AwsClients, createAwsClients, ledgerDocumentClient } from '../../shared/aws/clients.ts';
import {
  type DeleteTarget,
  entryDeletesRefused,
  forgetEntryDeleteRefusal,
} from '../../shared/ledger/entry-deletes.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { resolveIntrinsics, synthesizeCoordinator } from '../support/asl.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { type Call, evaluate, type PolicyStatement, recordCalls, roleStatements } from '../support/iam.ts';
import { objectsNamed, putStagedEntries } from '../support/staged-entries.ts';

let res: TestResources;

beforeAll(async () => {
  res = await freshResources('entry-deletes-adv');
});

afterEach(() => forgetEntryDeleteRefusal());

const doc = () => ledgerDocumentClient(res.clients.dynamodb);

const entries = (pipeline: string, count: number, partition = 0) =>
  putStagedEntries(res, pipeline, count, partition);
const naming = (targets: readonly DeleteTarget[]) => objectsNamed(res, targets);

type Statements = Array<{ Statement: string; Parameters?: unknown[] }>;
type Responses = Array<{ Error?: { Code?: string; Message?: string } }>;

/**
 * Clients whose BatchExecuteStatement calls go through `around`: it gets the statements and a `send` of any of
 * them to DynamoDB Local (their responses), and answers the call as it likes (or throws).
 */
function aroundBatches(
  around: (statements: Statements, send: (subset: Statements) => Promise<Responses>) => Promise<Responses>,
): AwsClients {
  const clients = createAwsClients();
  const middleware: InitializeMiddleware<object, MetadataBearer> = (next, context) => async (args) => {
    if (context.commandName !== 'BatchExecuteStatementCommand') return next(args);
    const input = args.input as { Statements: Statements };
    const send = async (subset: Statements): Promise<Responses> => {
      if (subset.length === 0) return [];
      const result = await next({ ...args, input: { ...input, Statements: subset } });
      return ((result.output as { Responses?: Responses }).Responses ?? []) as Responses;
    };
    const responses = await around(input.Statements, send);
    return { output: { Responses: responses, $metadata: {} } as never, response: {} };
  };
  (clients.dynamodb.middlewareStack as unknown as MiddlewareStack<object, MetadataBearer>).add(middleware, {
    step: 'initialize',
    name: 'aroundBatches',
    priority: 'high',
  });
  return clients;
}

function quietStderr(): () => void {
  const write = process.stderr.write;
  process.stderr.write = (() => true) as typeof process.stderr.write;
  return () => {
    process.stderr.write = write;
  };
}

describe('entry deletes in batches, under hostile answers', () => {
  it('26 entries make a call of 25 and one of 1, each decided by its own condition at both edges (first, 25th, 26th naming another object stay)', async () => {
    const pipeline = uniqueName('eda');
    const targets = await entries(pipeline, 26);
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const asked = targets.map((t, i) => ([0, 24, 25].includes(i) ? { ...t, key: `elsewhere-${i}` } : t));
    const ledger = new StagedEntries(clients.dynamodb, res.table, pipeline);
    expect(await ledger.deleteEntries(asked)).toBe(23);
    expect(calls.snapshot()).toEqual({ 'dynamodb:BatchExecuteStatement': 2 });
    expect(calls.statementWrites()).toBe(26);
    const left = await naming(targets);
    expect(left.filter((k) => k !== undefined)).toEqual(['obj-0-0', 'obj-0-24', 'obj-0-25']);
    expect(entryDeletesRefused()).toBe(false);
  });

  it('statements throttled, in conflict or failed inside DynamoDB (applied or not) go by transaction, which deletes only an entry still naming its object', async () => {
    const pipeline = uniqueName('eda');
    const targets = await entries(pipeline, 10);
    // 2 and 3: not applied, answered ThrottlingError / TransactionConflict; 4: applied, answered
    // InternalServerError; 5: not applied, throttled, and rewritten by the time the fallback runs to name another
    // object (a stray copy: nothing may delete it by the old name).
    const notApplied = new Set([2, 3, 5]);
    const errors: Record<number, string> = {
      2: 'ThrottlingError',
      3: 'TransactionConflict',
      4: 'InternalServerError',
      5: 'ThrottlingError',
    };
    const clients = aroundBatches(async (statements, send) => {
      const sent = statements.filter((_, i) => !notApplied.has(i));
      const answers = await send(sent);
      let next = 0;
      const responses = statements.map((_, i) => (notApplied.has(i) ? {} : answers[next++]!));
      await doc().send(
        new PutCommand({ TableName: res.table, Item: { ...targets[5]!.at, key: 'rewritten' } }),
      );
      return responses.map((r, i) => (errors[i] ? { Error: { Code: errors[i], Message: 'injected' } } : r));
    });
    const calls = new CallCounter().attach(clients);
    const ledger = new StagedEntries(clients.dynamodb, res.table, pipeline);
    // 6 by the batch; 2 and 3 by transaction; 4 already gone and 5 naming another object refused.
    expect(await ledger.deleteEntries(targets)).toBe(8);
    expect(calls.snapshot()['dynamodb:BatchExecuteStatement']).toBe(1);
    expect(calls.snapshot()['dynamodb:TransactWriteItems']).toBeGreaterThanOrEqual(1);
    const left = await naming(targets);
    expect(left.map((k, i) => [i, k]).filter(([, k]) => k !== undefined)).toEqual([[5, 'rewritten']]);
    expect(entryDeletesRefused()).toBe(false);
  });

  it('responses missing (a short answer) leave those deletes to the transactions: applied or not, every entry asked for goes', async () => {
    const pipeline = uniqueName('eda');
    const targets = await entries(pipeline, 25);
    // DynamoDB applied the first 20 statements but answered only 15; the last 5 were never applied.
    const clients = aroundBatches(async (statements, send) =>
      (await send(statements.slice(0, 20))).slice(0, 15),
    );
    const ledger = new StagedEntries(clients.dynamodb, res.table, pipeline);
    expect(await ledger.deleteEntries(targets)).toBe(20);
    expect((await naming(targets)).filter((k) => k !== undefined)).toEqual([]);
    expect(entryDeletesRefused()).toBe(false);
  });

  it('a whole call failing after DynamoDB applied part of it fails as transient; the retry finishes and deletes nothing it was not asked to', async () => {
    const pipeline = uniqueName('eda');
    const targets = await entries(pipeline, 30);
    const asked = targets.map((t, i) => (i === 27 ? { ...t, key: 'elsewhere' } : t));
    let failing = true;
    const clients = aroundBatches(async (statements, send) => {
      if (!failing) return send(statements);
      await send(statements.slice(0, 10));
      throw Object.assign(new Error('internal error after a partial apply'), {
        name: 'InternalServerError',
        $fault: 'server',
        $metadata: { httpStatusCode: 500 },
      });
    });
    const ledger = new StagedEntries(clients.dynamodb, res.table, pipeline);
    await expect(ledger.deleteEntries(asked)).rejects.toMatchObject({ name: 'TransientAwsError' });
    expect(entryDeletesRefused()).toBe(false);
    failing = false;
    await ledger.deleteEntries(asked);
    expect((await naming(targets)).filter((k) => k !== undefined)).toEqual(['obj-0-27']);
  });

  it('an item named twice in one call: decided by the first target, the repeat by transaction, whichever of the two names the object', async () => {
    const pipeline = uniqueName('eda');
    const targets = await entries(pipeline, 26);
    const [a, b] = targets;
    // a asked first under another name, then under its own; b first under its own, then under another.
    const asked: DeleteTarget[] = [
      { ...a!, key: 'elsewhere' },
      ...targets.slice(1),
      a!,
      { ...b!, key: 'elsewhere' },
    ];
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const ledger = new StagedEntries(clients.dynamodb, res.table, pipeline);
    await ledger.deleteEntries(asked);
    expect((await naming(targets)).filter((k) => k !== undefined)).toEqual([]);
    // 26 distinct items: two calls at the 25 boundary; the two repeats by a transaction, cancelled by b's
    // condition and sent again without it.
    expect(calls.snapshot()['dynamodb:BatchExecuteStatement']).toBe(2);
    expect(calls.snapshot()['dynamodb:TransactWriteItems']).toBe(2);
  });

  it("a refusal in one pipeline's cleanup sends every later pipeline of the container by transaction, and forgetting it restores batches", async () => {
    const denied = aroundBatches(async (statements) =>
      statements.map(() => ({ Error: { Code: 'AccessDenied', Message: 'no dynamodb:PartiQLDelete' } })),
    );
    const first = uniqueName('eda');
    const second = uniqueName('eda');
    const restore = quietStderr();
    try {
      await new StagedEntries(denied.dynamodb, res.table, first).deleteEntries(await entries(first, 3));
    } finally {
      restore();
    }
    expect(entryDeletesRefused()).toBe(true);
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const other = await entries(second, 3, 1);
    expect(await new StagedEntries(clients.dynamodb, res.table, second).deleteEntries(other)).toBe(3);
    expect(calls.snapshot()).toEqual({ 'dynamodb:TransactWriteItems': 1 });
    forgetEntryDeleteRefusal();
    const again = await entries(second, 3, 2);
    expect(await new StagedEntries(clients.dynamodb, res.table, second).deleteEntries(again)).toBe(3);
    expect(calls.snapshot()['dynamodb:BatchExecuteStatement']).toBe(1);
  });

  it('a throttled call as a whole is not a refusal: PartiQL stays on, nothing is deleted, the failure is transient', async () => {
    const pipeline = uniqueName('eda');
    const targets = await entries(pipeline, 3);
    const clients = aroundBatches(async () => {
      throw Object.assign(new Error('rate exceeded'), {
        name: 'ProvisionedThroughputExceededException',
        $metadata: { httpStatusCode: 400 },
      });
    });
    await expect(
      new StagedEntries(clients.dynamodb, res.table, pipeline).deleteEntries(targets),
    ).rejects.toMatchObject({ name: 'TransientAwsError' });
    expect(entryDeletesRefused()).toBe(false);
    expect((await naming(targets)).every((k) => k !== undefined)).toBe(true);
  });

  it('a delete of an entry already gone and one naming another object are never retried by transaction (no extra call)', async () => {
    const pipeline = uniqueName('eda');
    const targets = await entries(pipeline, 4);
    await doc().send(new DeleteCommand({ TableName: res.table, Key: targets[1]!.at }));
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const asked = targets.map((t, i) => (i === 2 ? { ...t, key: 'elsewhere' } : t));
    await new StagedEntries(clients.dynamodb, res.table, pipeline).deleteEntries(asked);
    expect(calls.snapshot()).toEqual({ 'dynamodb:BatchExecuteStatement': 1 });
    expect(await naming(targets)).toEqual([undefined, undefined, 'obj-0-2', undefined]);
  });
});

describe('the PartiQLDelete grant against the calls the deletes make', () => {
  it("allows cleanup's and abort's statements on staged entries of their pipeline, and refuses another item kind, another pipeline, or a statement without its key", async () => {
    const deployed = synthesizeCoordinator();
    const made: Call[] = [];
    const clients = createAwsClients();
    recordCalls(clients, (found) => made.push(...found));
    const targets = await entries('orders', 3, 7);
    await new StagedEntries(clients.dynamodb, res.table, 'orders').deleteEntries([
      targets[0]!,
      { at: targets[1]!.at },
      { ...targets[2]!, key: 'elsewhere' },
    ]);
    const statements = made.filter((c) => c.action === 'dynamodb:PartiQLDelete');
    expect(statements.map((c) => c.leadingKeys)).toEqual([
      [keys.stagedPk('orders', 'orders', 7)],
      [keys.stagedPk('orders', 'orders', 7)],
      [keys.stagedPk('orders', 'orders', 7)],
    ]);
    const cleanupFn = deployed.stack.getLogicalId(
      deployed.construct.functions.cleanup.node.defaultChild as never,
    );
    const grant = roleStatements(deployed.template, cleanupFn).find((s) =>
      [s.Action].flat().includes('dynamodb:PartiQLDelete'),
    );
    expect(grant).toBeDefined();
    const table = String(resolveIntrinsics([grant!.Resource].flat()[0], deployed.template));
    for (const step of ['cleanup', 'abort'] as const) {
      const fn = deployed.stack.getLogicalId(deployed.construct.functions[step].node.defaultChild as never);
      const role = roleStatements(deployed.template, fn) as PolicyStatement[];
      const decide = (context: Record<string, string | string[]>) =>
        evaluate(deployed.template, role, [], {
          principal: 'arn:aws:iam::123456789012:role/any',
          action: 'dynamodb:PartiQLDelete',
          resource: table,
          context,
        });
      for (const call of statements)
        expect(decide({ 'dynamodb:LeadingKeys': [...call.leadingKeys] })).toBe('allow');
      expect(decide({ 'dynamodb:LeadingKeys': ['orders#CHECKPOINT'] }), step).toBe('implicit-deny');
      expect(decide({ 'dynamodb:LeadingKeys': ['orders#FENCE#00'] }), step).toBe('implicit-deny');
      expect(decide({ 'dynamodb:LeadingKeys': ['orders#CLAIM#k'] }), step).toBe('implicit-deny');
      expect(decide({ 'dynamodb:LeadingKeys': ['other#STAGED#orders#0'] }), step).toBe('implicit-deny');
      expect(
        decide({ 'dynamodb:LeadingKeys': [keys.stagedPk('orders', 'orders', 7), 'orders#CHECKPOINT'] }),
        step,
      ).toBe('implicit-deny');
      expect(decide({}), step).toBe('implicit-deny');
    }
    // Only cleanup and abort may delete staged entries by PartiQL.
    for (const step of ['begin', 'prepare', 'decide', 'promote', 'commit'] as const) {
      const fn = deployed.stack.getLogicalId(deployed.construct.functions[step].node.defaultChild as never);
      const actions = roleStatements(deployed.template, fn).flatMap((s) => [s.Action].flat());
      expect(actions, step).not.toContain('dynamodb:PartiQLDelete');
    }
  });
});
