/**
 * Staged entries deleted in batches of conditional PartiQL deletes (shared/ledger/entry-deletes.ts), through the
 * ledger's `deleteEntries`, against DynamoDB Local: each entry decided by its own condition, 25 to a call, and the
 * transactional deletes kept for what a batch does not decide (a refused statement, a refused call).
 */
import { DeleteCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { type AwsClients, createAwsClients, ledgerDocumentClient } from '../../shared/aws/clients.ts';
import {
  type DeleteTarget,
  entryDeletesRefused,
  forgetEntryDeleteRefusal,
} from '../../shared/ledger/entry-deletes.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { objectsNamed, putStagedEntries } from '../support/staged-entries.ts';

let res: TestResources;

beforeAll(async () => {
  res = await freshResources('entry-deletes');
});

afterEach(() => forgetEntryDeleteRefusal());

const entries = (pipeline: string, count: number) => putStagedEntries(res, pipeline, count);

/** How many of `targets` are still in the ledger. */
async function present(targets: readonly DeleteTarget[]): Promise<number> {
  return (await objectsNamed(res, targets)).filter((key) => key !== undefined).length;
}

/** Clients whose BatchExecuteStatement calls are answered by `answer` instead of DynamoDB (or pass through). */
function answeringBatches(answer: (statements: number) => unknown): AwsClients {
  const clients = createAwsClients();
  clients.dynamodb.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== 'BatchExecuteStatementCommand') return next(args);
      const statements = (args.input as { Statements: unknown[] }).Statements.length;
      const output = answer(statements);
      if (output instanceof Error) throw output;
      return { output: output as never, response: {} };
    },
    { step: 'build', name: 'answerBatches' },
  );
  return clients;
}

function capturingStderr(): { lines: string[]; restore: () => void } {
  const lines: string[] = [];
  const write = process.stderr.write;
  process.stderr.write = ((text: string) => lines.push(String(text)) > 0) as typeof process.stderr.write;
  return { lines, restore: () => (process.stderr.write = write) };
}

describe('staged entries deleted in batches', () => {
  it('deletes 60 entries in 3 calls, each by its own condition: one naming another object stays, one gone is not counted', async () => {
    const pipeline = uniqueName('ed');
    const targets = await entries(pipeline, 60);
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const ledger = new StagedEntries(clients.dynamodb, res.table, pipeline);
    const asked = targets.map((t, i) => (i === 7 ? { ...t, key: 'another-object' } : t));
    const doc = ledgerDocumentClient(res.clients.dynamodb);
    await doc.send(new DeleteCommand({ TableName: res.table, Key: targets[30]!.at }));
    expect(await ledger.deleteEntries(asked)).toBe(58);
    expect(calls.snapshot()).toEqual({ 'dynamodb:BatchExecuteStatement': 3 });
    expect(await present(targets)).toBe(1);
    expect(await present([targets[7]!])).toBe(1);
    expect(entryDeletesRefused()).toBe(false);
  });

  it('an unconditional target (a rejected item) is deleted whatever it names', async () => {
    const pipeline = uniqueName('ed');
    const [target] = await entries(pipeline, 1);
    const ledger = new StagedEntries(res.clients.dynamodb, res.table, pipeline);
    expect(await ledger.deleteEntries([{ at: target!.at }])).toBe(1);
    expect(await present([target!])).toBe(0);
  });

  it('a statement refused for a missing permission goes by transaction, and the container sends no more PartiQL', async () => {
    const pipeline = uniqueName('ed');
    const targets = await entries(pipeline, 30);
    const clients = answeringBatches((statements) => ({
      Responses: Array.from({ length: statements }, () => ({
        Error: { Code: 'AccessDenied', Message: 'no dynamodb:PartiQLDelete' },
      })),
    }));
    const calls = new CallCounter().attach(clients);
    const stderr = capturingStderr();
    try {
      const ledger = new StagedEntries(clients.dynamodb, res.table, pipeline);
      expect(await ledger.deleteEntries(targets.slice(0, 20))).toBe(20);
      expect(calls.snapshot()).toEqual({
        'dynamodb:BatchExecuteStatement': 1,
        'dynamodb:TransactWriteItems': 1,
      });
      expect(entryDeletesRefused()).toBe(true);
      expect(await ledger.deleteEntries(targets.slice(20))).toBe(10);
      expect(calls.snapshot()).toEqual({
        'dynamodb:BatchExecuteStatement': 1,
        'dynamodb:TransactWriteItems': 2,
      });
      expect(await present(targets)).toBe(0);
      expect(stderr.lines).toHaveLength(1);
      expect(stderr.lines[0]).toMatch(/PartiQLDelete/);
    } finally {
      stderr.restore();
    }
  });

  it('a call refused as a whole as invalid goes by transaction; a throttled call fails as transient, deleting nothing twice', async () => {
    const pipeline = uniqueName('ed');
    const targets = await entries(pipeline, 4);
    const invalid = Object.assign(new Error('unsupported statement'), { name: 'ValidationException' });
    const stderr = capturingStderr();
    try {
      const refused = new StagedEntries(answeringBatches(() => invalid).dynamodb, res.table, pipeline);
      expect(await refused.deleteEntries(targets.slice(0, 2))).toBe(2);
      expect(await present(targets)).toBe(2);
      expect(entryDeletesRefused()).toBe(true);
    } finally {
      stderr.restore();
    }
    forgetEntryDeleteRefusal();
    const throttled = Object.assign(new Error('slow down'), {
      name: 'ThrottlingException',
      $metadata: { httpStatusCode: 400 },
    });
    const clients = answeringBatches(() => throttled);
    const ledger = new StagedEntries(clients.dynamodb, res.table, pipeline);
    await expect(ledger.deleteEntries(targets.slice(2))).rejects.toMatchObject({ name: 'TransientAwsError' });
    expect(await present(targets)).toBe(2);
    expect(entryDeletesRefused()).toBe(false);
  });
});
