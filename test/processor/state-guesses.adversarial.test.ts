/**
 * The guesses of min, max and latest (`shared/ledger/state-update.ts`) against the processor's loops that learn
 * from a refused guess: the exactly-once staging loop (`partition-stager.ts`) and the direct path of the weaker
 * guarantees (`direct-state.ts`). Interleavings built on the real parts: a container that has not met the keys yet
 * (a cold start, a belief forgotten), another container moving a key between this one's tries, a transaction whose
 * outcome the sender does not learn, a zombie, and what a refusal leaves in the exactly-once bookkeeping.
 * Real DynamoDB Local and S3 server.
 */
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { type AwsClients, createAwsClients, ledgerDocumentClient } from '../../shared/aws/clients.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { TransientAwsError } from '../../shared/errors.ts';
import { StagingLedger } from '../../shared/ledger/staging-ledger.ts';
import { StateConditionError } from '../../shared/ledger/state-items.ts';
import { forgetStateKnowledge } from '../../shared/ledger/state-knowledge.ts';
import { readStateItem } from '../../shared/ledger/state-read.ts';
import { applyDirectState } from '../../shared/processor/direct-state.ts';
import { Processor } from '../../shared/processor/processor.ts';
import type { PartitionReport } from '../../shared/processor/report.ts';
import { readFinalRows } from '../../shared/sink/verify.ts';
import type { StateDelta, Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources, uniqueName } from '../support/aws.ts';
import { evaluatedRecord } from '../support/evaluated.ts';
import { mskEvent } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('guesses');
});

const ledger = () => new StagingLedger(res.clients.dynamodb, res.table);
const delta = (key: string, o: Partial<StateDelta>): StateDelta => ({ key, fields: {}, add: {}, ...o });

/** The real ledger, counting the condition refusals its direct transactions meet. */
function counting(before?: (txn: Parameters<StagingLedger['applyState']>[0]) => Promise<void>) {
  const real = ledger();
  const seen = { tries: 0, refusals: 0 };
  const port: Parameters<typeof applyDirectState>[0]['ledger'] = {
    readState: (pipeline, key) => real.readState(pipeline, key),
    applyState: async (txn) => {
      seen.tries += 1;
      await before?.(txn);
      try {
        await real.applyState(txn);
      } catch (error) {
        if (error instanceof StateConditionError) seen.refusals += 1;
        throw error;
      }
    },
  };
  return { port, seen };
}

/** Another container's ledger: the modules loaded afresh, so its beliefs are its own. */
async function otherContainer(): Promise<StagingLedger> {
  vi.resetModules();
  const other = await import('../../shared/ledger/staging-ledger.ts');
  return new other.StagingLedger(res.clients.dynamodb, res.table);
}

const values = async (pipeline: string, key: string) =>
  (await readStateItem({ doc: ledgerDocumentClient(res.clients.dynamodb), table: res.table }, pipeline, key))
    ?.values;

/** Stores a max of `high` on each key, as the protocol writes it (from another partition, say). */
async function seedMaxima(pipeline: string, keys: readonly string[], high: number): Promise<void> {
  for (let i = 0; i < keys.length; i += 90) {
    const seed = keys.slice(i, i + 90).map((key) => delta(key, { max: { high } }));
    await ledger().applyState({ pipeline, topic: 'orders', partition: 9, state: seed });
  }
}

/** Per record: the max (`high`) and a count (`n`, added) of each of its keys; its row and id name the first. */
const maxima: Transform = {
  name: 'maxima',
  valueFormat: 'json',
  apply(record) {
    const { keys, high } = JSON.parse(Buffer.from(record.rawValue ?? '', 'base64').toString()) as {
      id: string;
      keys: string[];
      high: number;
    };
    return {
      kind: 'ok',
      rows: [{ key: keys[0] }],
      state: keys.map((key) => delta(key, { add: { n: 1 }, max: { high } })),
      body: { id: keys[0] },
    };
  },
};

const settingsFor = (overrides: Partial<SettingsInput> = {}): Settings =>
  settingsIn(res, 'guesses', { idempotencyKey: 'none', maxTransactionItems: 8, ...overrides });

/** A batch of partition 0: each record takes the max of `perRecord` consecutive keys with `high`. */
function batchOf(keys: readonly string[], high: number, perRecord = 5) {
  const specs = [];
  for (let offset = 0; offset * perRecord < keys.length; offset += 1) {
    const own = keys.slice(offset * perRecord, (offset + 1) * perRecord);
    const value = JSON.stringify({ id: own[0], keys: own, high });
    specs.push({ partition: 0, offset, value });
  }
  return mskEvent(specs);
}

/**
 * Keys a cold container meets in a batch of 27 records of five keys each. maxTransactionItems 8: a fence, an
 * entry and five state keys take a chunk, so each record is a chunk of its own.
 */
const COLD_KEYS = Array.from({ length: 135 }, (_, i) => `sensor-${i}`);
const COLD_RECORDS = COLD_KEYS.length / 5;

describe('the relearning bound on a legitimate workload', () => {
  it('at-least-once: a container that has not met the keys applies a long batch whose values leave the stored maxima as they are', async () => {
    // One writer, no contention. The stored maxima were written earlier (another container, or this one before
    // a cold start or before the keys left its 10,000-key memory). maxTransactionItems 8: six state keys a chunk,
    // 27 chunks. Each chunk's first try guesses `apply` for keys it holds no belief of; DynamoDB refuses (the
    // stored max is above), the ledger learns, the second try skips and commits: one refusal a chunk, each one
    // turning the chunk's guesses to skips: progress, which the bound never counts (it counts, per chunk, the
    // refusals that turn no guess), so 27 refusals in a batch do not fail it.
    const pipeline = uniqueName('cold');
    const keys = Array.from({ length: 162 }, (_, i) => `sensor-${i}`);
    await seedMaxima(pipeline, keys, 100);
    forgetStateKnowledge();
    const { port, seen } = counting();
    const records = keys.map((key, offset) => evaluatedRecord(offset, [delta(key, { max: { high: 1 } })]));
    const target = { ledger: port, pipeline, topic: 'orders', partition: 0, maxItems: 8 };
    const outcome = await applyDirectState(target, records).catch((error: unknown) => error);
    expect(outcome).not.toBeInstanceOf(StateConditionError);
    expect(outcome).toMatchObject({ transactions: 27 });
    expect(seen.refusals).toBe(27);
    expect(await values(pipeline, 'sensor-161')).toEqual({ high: 100 });
  });

  it('exactly-once: a cold container stages a long batch whose values leave the stored maxima as they are, without failing it', async () => {
    // The staging loop judges the same refusals (one a chunk, each turning guesses) by the same bound: were they
    // counted, the 26th would fail the batch, reported as a partition stopped on a structural error.
    const settings = settingsFor();
    await seedMaxima(settings.pipelineId, COLD_KEYS, 100);
    forgetStateKnowledge();
    const stopped: Error[] = [];
    const processor = new Processor({
      settings,
      clients: res.clients,
      transform: maxima,
      observer: { partitionStopped: (error) => stopped.push(error) },
    });
    const outcome = await processor.processEvent(batchOf(COLD_KEYS, 1)).catch((error: unknown) => error);
    expect(stopped).toEqual([]);
    expect(outcome).toMatchObject({ partitions: [{ stagedRows: COLD_RECORDS, chunks: COLD_RECORDS }] });
  });

  it('none: a cold container writes every row of a long batch whose values leave the stored maxima as they are', async () => {
    // Under `none` a failed batch is acknowledged as it stands: a bound firing here would drop the batch's rows
    // (the state goes first, the rows after it), on a workload with no fault and no other writer.
    const settings = settingsFor({ deliveryGuarantee: 'none' });
    await seedMaxima(settings.pipelineId, COLD_KEYS, 100);
    forgetStateKnowledge();
    const processor = new Processor({ settings, clients: res.clients, transform: maxima });
    const report = await processor.processEvent(batchOf(COLD_KEYS, 1));
    expect(report.partitions.map((p) => p.stagedRows)).toEqual([COLD_RECORDS]);
  });

  it('exactly-once: a batch failed on condition refusals stages the rest on its retries, each record once', async () => {
    // Whether or not the bound fails the batch, what committed stays committed (the fence moved past it), the
    // claims written ahead are released or kept for the retry, and the retry stages the rest: each record once,
    // each count added once, each max the join. Keyed records of four keys: a fence, an entry and four state keys
    // a chunk (the claims go ahead), so each record is a chunk of its own again.
    const settings = settingsFor({ idempotencyKey: 'json:id' });
    const keys = COLD_KEYS.slice(0, 4 * COLD_RECORDS);
    await seedMaxima(settings.pipelineId, keys, 100);
    forgetStateKnowledge();
    let attempts = 0;
    let report: unknown;
    while (report === undefined) {
      attempts += 1;
      const processor = new Processor({ settings, clients: res.clients, transform: maxima });
      const outcome = await processor.processEvent(batchOf(keys, 1, 4)).catch((error: unknown) => error);
      if (outcome instanceof Error) expect(outcome).toBeInstanceOf(StateConditionError);
      else report = outcome;
      expect(attempts).toBeLessThan(4);
    }
    const { duplicatesByOffset, duplicatesByKey, deadLettered, stagedRows } = (
      report as { partitions: PartitionReport[] }
    ).partitions[0]!;
    expect({ duplicatesByKey, deadLettered, staged: duplicatesByOffset + stagedRows }).toEqual({
      duplicatesByKey: 0,
      deadLettered: 0,
      staged: COLD_RECORDS,
    });
    // The records at either side of where the bound fires (the 26th refusal), and the first and last.
    for (const record of [0, 24, 25, 26]) {
      for (const key of keys.slice(4 * record, 4 * record + 4)) {
        expect(await values(settings.pipelineId, key)).toEqual({ high: 100, n: 1 });
      }
    }
  });
});

describe('the relearning bound under other writers of the same keys', () => {
  it('a writer a little behind another on a hot latest key applies a long batch (each chunk refused once)', async () => {
    // Two partitions whose records carry nearly the same times write `last` of one key ("global"), in another
    // container each. Before each chunk of this writer the other commits a value just later than the chunk's:
    // this writer's `apply` (its belief is the other's previous value, below its own) is refused, it learns,
    // skips and commits. One refusal a chunk, each meaning another writer committed: the lock-free progress the
    // loop relies on, which the bound must not count.
    const pipeline = uniqueName('hot');
    const other = await otherContainer();
    let moved = -1;
    const { port, seen } = counting(async (txn) => {
      const at = txn.state.find((d) => d.key === 'global')?.latest?.last?.at;
      if (at === undefined || at <= moved) return;
      moved = at + 1;
      await other.applyState({
        pipeline,
        topic: 'orders',
        partition: 1,
        state: [delta('global', { latest: { last: { value: `other-${moved}`, at: moved } } })],
      });
    });
    // maxTransactionItems 8: "global" and five records' own keys a chunk, 27 chunks.
    const records = Array.from({ length: 135 }, (_, offset) =>
      evaluatedRecord(offset, [
        delta('global', { latest: { last: { value: `mine-${offset}`, at: 10 * offset } } }),
        delta(`own-${offset}`, { add: { n: 1 } }),
      ]),
    );
    const target = { ledger: port, pipeline, topic: 'orders', partition: 0, maxItems: 8 };
    const outcome = await applyDirectState(target, records).catch((error: unknown) => error);
    expect(outcome).not.toBeInstanceOf(StateConditionError);
    expect(seen.refusals).toBe(27);
    expect(await values(pipeline, 'global')).toEqual({ last: `other-${10 * 134 + 1}` });
  });

  it('a chunk whose keys other writers pass one at a time between its tries commits once it has learnt them all', async () => {
    // One record, thirty keys (maxTransactionItems 40). Before each try another container moves one more of the
    // keys past this record's value: each refusal names the one key moved and teaches it, the next try skips it
    // and is refused on the next. Thirty refusals that each mean another writer committed, in one chunk: each
    // turns a new guess, so a bound that counts refusals without progress lets the chunk commit.
    const pipeline = uniqueName('many');
    const other = await otherContainer();
    const keys = Array.from({ length: 30 }, (_, i) => `region-${i}`);
    let next = 0;
    const { port, seen } = counting(async () => {
      if (next >= keys.length) return;
      const key = keys[next++]!;
      await other.applyState({
        pipeline,
        topic: 'orders',
        partition: 1,
        state: [delta(key, { latest: { last: { value: 'theirs', at: 2 } } })],
      });
    });
    const mine = evaluatedRecord(
      0,
      keys.map((key) => delta(key, { latest: { last: { value: 'mine', at: 1 } } })),
    );
    const target = { ledger: port, pipeline, topic: 'orders', partition: 0, maxItems: 40 };
    const outcome = await applyDirectState(target, [mine]).catch((error: unknown) => error);
    expect(outcome).not.toBeInstanceOf(StateConditionError);
    expect(seen.refusals).toBe(30);
    expect(await values(pipeline, 'region-29')).toEqual({ last: 'theirs' });
  });
});

/**
 * Clients whose next TransactWriteItems, once `lose.arm()` is called, commits in DynamoDB and loses its answer:
 * `inside` the SDK's retries (the SDK sends it again with the same ClientRequestToken), or `outside` them (the
 * caller gets a timeout and never learns the outcome).
 */
function losingClients(where: 'inside' | 'outside'): {
  clients: AwsClients;
  lose: { arm(): void; lost: number; sent: number };
} {
  const clients = createAwsClients();
  const lose = {
    armed: false,
    lost: 0,
    sent: 0,
    arm() {
      this.armed = true;
    },
  };
  type Next = (args: { input: { TransactItems?: unknown[] } }) => Promise<unknown>;
  (clients.dynamodb.middlewareStack as unknown as { add(m: unknown, o: object): void }).add(
    (next: Next) => async (args: Parameters<Next>[0]) => {
      const output = await next(args);
      if (args.input.TransactItems === undefined) return output;
      lose.sent += 1;
      if (!lose.armed) return output;
      lose.armed = false;
      lose.lost += 1;
      throw Object.assign(new Error('the answer was lost after DynamoDB committed'), {
        name: 'TimeoutError',
        $metadata: {},
      });
    },
    where === 'inside'
      ? { step: 'deserialize', name: 'loseAnswer' }
      : { step: 'initialize', name: 'loseAnswer', priority: 'low' },
  );
  return { clients, lose };
}

describe('a transaction whose answer is lost', () => {
  it('sent again by the SDK (same ClientRequestToken) after DynamoDB committed: applied once, and believed', async () => {
    forgetStateKnowledge();
    const pipeline = uniqueName('token');
    const { clients, lose } = losingClients('inside');
    const real = new StagingLedger(clients.dynamodb, res.table);
    const target = { ledger: real, pipeline, topic: 'orders', partition: 0, maxItems: 8 };
    lose.arm();
    await applyDirectState(target, [
      evaluatedRecord(0, [delta('k', { add: { n: 1 }, max: { high: 5 }, min: { low: 5 } })]),
    ]);
    expect({ lost: lose.lost, sent: lose.sent }).toEqual({ lost: 1, sent: 2 });
    expect(await values(pipeline, 'k')).toEqual({ n: 1, high: 5, low: 5 });
    // Believed once committed: a value that moves nothing is skipped on the first try (a refusal would throw here).
    await real.applyState({
      pipeline,
      topic: 'orders',
      partition: 0,
      state: [delta('k', { max: { high: 4 }, min: { low: 6 } })],
    });
    expect(lose.sent).toBe(3);
  });

  it('at-least-once, the outcome unknown to the sender: the fields hold the join and the retry commits on its first try', async () => {
    forgetStateKnowledge();
    const pipeline = uniqueName('unknown');
    const { clients, lose } = losingClients('outside');
    const sender = new StagingLedger(clients.dynamodb, res.table);
    const batch = [
      evaluatedRecord(0, [
        delta('k', {
          add: { n: 1 },
          max: { high: 5 },
          min: { low: 5 },
          latest: { last: { value: 'x', at: 5 } },
        }),
      ]),
    ];
    const target = { ledger: sender, pipeline, topic: 'orders', partition: 0, maxItems: 8 };
    lose.arm();
    await expect(applyDirectState(target, batch)).rejects.toBeInstanceOf(TransientAwsError);
    // Another partition of this container, a smaller max and an earlier latest: a belief of the lost commit would
    // make no guess wrong (it is true), and none was taken; the item as stored decides.
    const { port, seen } = counting();
    await applyDirectState({ ...target, ledger: port, partition: 1 }, [
      evaluatedRecord(0, [
        delta('k', { max: { high: 3 }, min: { low: 7 }, latest: { last: { value: 'w', at: 4 } } }),
      ]),
    ]);
    // The mapping's retry of the batch: applying equal values again is applying them once.
    await applyDirectState({ ...target, ledger: port }, batch);
    // Partition 1 learnt the item once (its values move nothing); the retry skipped on what it taught.
    expect(seen.refusals).toBe(1);
    expect(await values(pipeline, 'k')).toEqual({ n: 2, high: 5, low: 5, last: 'x' });
  });

  it('exactly-once, the outcome unknown to the sender: the retry drops what committed, each count added once', async () => {
    forgetStateKnowledge();
    const settings = settingsFor();
    const { clients, lose } = losingClients('outside');
    // Sixteen records over eight keys: three chunks (five, six and five state keys).
    const keys = Array.from({ length: 16 }, (_, i) => `sensor-${i % 8}`);
    const batch = mskEvent(
      keys.map((key, offset) => ({
        partition: 0,
        offset,
        value: JSON.stringify({ keys: [key], high: offset }),
      })),
    );
    // The second chunk's transaction commits and its answer is lost.
    let stagings = 0;
    const processor = new Processor({
      settings,
      clients,
      transform: maxima,
      hooks: {
        onStep: (step) => {
          if (step === 'after-stage-write' && ++stagings === 2) lose.arm();
        },
      },
    });
    await expect(processor.processEvent(batch)).rejects.toBeInstanceOf(TransientAwsError);
    expect(lose.lost).toBe(1);
    const retry = await new Processor({ settings, clients: res.clients, transform: maxima }).processEvent(
      batch,
    );
    expect(retry.partitions[0]).toMatchObject({ duplicatesByOffset: 11, chunks: 1 });
    for (let i = 0; i < 8; i += 1) {
      expect(await values(settings.pipelineId, `sensor-${i}`)).toEqual({ n: 2, high: 8 + i });
    }
  });
});

interface Reading {
  readonly id: string;
  readonly c: number;
  /** `add`: the record adds to `high`, a field `max` holds (a transform's mistake). */
  readonly wrong?: 'add';
}

/** Per record: the hot key "s" (a count, a max, a latest) and two keys of its own; rows keyed by `id`. */
const readings: Transform = {
  name: 'readings',
  valueFormat: 'json',
  apply(record) {
    const body = JSON.parse(Buffer.from(record.rawValue ?? '', 'base64').toString()) as Reading;
    const own = ['a', 'b'].map((k) => delta(`own-${record.offset}${k}`, { add: { n: 1 } }));
    const state =
      body.wrong === 'add'
        ? [delta('s', { add: { high: 1 } })]
        : [
            delta('s', {
              add: { readings: 1 },
              max: { high: body.c },
              latest: { last: { value: `mine-${body.c}`, at: body.c } },
            }),
            ...own,
          ];
    return { kind: 'ok', rows: [{ id: body.id }], state, body: { ...body } };
  },
};

describe('what a refused guess leaves in the exactly-once bookkeeping', () => {
  it.each([
    ['claims ahead', { claimWrite: 'ahead' }],
    ['claims in the transaction', { claimWrite: 'in-transaction' }],
    ['a key window', { idempotencyScope: 'partition' }],
  ] as const)(
    '%s: every chunk refused once on a hot key, a record dead-lettered for its operation: each record staged once, its key handed on, counts added once',
    async (_, overrides) => {
      const settings = settingsFor({ idempotencyKey: 'json:id', maxTransactionItems: 10, ...overrides });
      const pipeline = settings.pipelineId;
      // Another container moves "s" just past each chunk's values before the chunk's transaction: its first try
      // is refused and learns, the second commits. Offset 1 adds to the max "high" (dead-lettered), and offset 2
      // has its key: the key goes to offset 2.
      const other = await otherContainer();
      let moved = -1;
      let refusals = 0;
      const real = new StagingLedger(res.clients.dynamodb, res.table);
      const port = Object.create(real) as StagingLedger;
      port.stage = async (txn) => {
        const high = txn.state.find((d) => d.key === 's')?.max?.high;
        if (high !== undefined && high > moved) {
          moved = high + 1;
          await other.applyState({
            pipeline,
            topic: 'orders',
            partition: 1,
            state: [delta('s', { max: { high: moved }, latest: { last: { value: 'other', at: moved } } })],
          });
        }
        return real.stage(txn).catch((error: unknown) => {
          if (error instanceof StateConditionError) refusals += 1;
          throw error;
        });
      };
      const specs = Array.from({ length: 10 }, (_, offset) => ({
        partition: 0,
        offset,
        value: JSON.stringify({
          id: `r${offset === 2 ? 1 : offset}`,
          c: 10 * offset,
          ...(offset === 1 ? { wrong: 'add' } : {}),
        }),
      }));
      const first = await new Processor(
        { settings, clients: res.clients, transform: readings },
        port,
      ).processEvent(mskEvent(specs));
      expect(first.partitions[0]).toMatchObject({ deadLettered: 1, duplicatesByKey: 0, keyConflicts: 0 });
      // Each committed chunk refused once on "s", and once more for the record that adds to a max.
      expect(refusals).toBe(first.partitions[0]!.chunks + 1);
      forgetStateKnowledge();
      const again = await new Processor({ settings, clients: res.clients, transform: readings }).processEvent(
        mskEvent(specs),
      );
      expect(again.partitions[0]).toMatchObject({ duplicatesByOffset: 10, chunks: 0 });
      expect((await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint()).status).toBe(
        'committed',
      );
      const rows = await readFinalRows({ s3: res.clients.s3, bucket: res.bucket, pipeline });
      const output = rows.filter((r) => r.stream !== 'deadletter').map((r) => r.row.source);
      const dead = rows.filter((r) => r.stream === 'deadletter').map((r) => r.row.source);
      expect(output.map((source) => (source as { offset: number }).offset).sort((a, b) => a - b)).toEqual([
        0, 2, 3, 4, 5, 6, 7, 8, 9,
      ]);
      expect(dead).toEqual([{ topic: 'orders', partition: 0, offset: 1 }]);
      expect(await values(pipeline, 's')).toEqual({ readings: 9, high: 91, last: 'other' });
      for (const offset of [0, 2, 9]) expect(await values(pipeline, `own-${offset}a`)).toEqual({ n: 1 });
      expect(await values(pipeline, 'own-1a')).toBeUndefined();
    },
  );

  it('a zombie held between its chunks while the retry stages the batch: each record once', async () => {
    const settings = settingsFor({ idempotencyKey: 'json:id', maxTransactionItems: 10 });
    const pipeline = settings.pipelineId;
    const specs = Array.from({ length: 10 }, (_, offset) => ({
      partition: 0,
      offset,
      value: JSON.stringify({ id: `r${offset}`, c: 10 * offset }),
    }));
    // The zombie commits its first chunk (three records), then waits before its second chunk's transaction; it
    // learns nothing from the transactions its stale fence cancels once it resumes.
    let resume: () => void = () => {};
    const held = new Promise<void>((open) => {
      resume = open;
    });
    let reached: () => void = () => {};
    const waiting = new Promise<void>((open) => {
      reached = open;
    });
    const zombie = new Processor({
      settings,
      clients: res.clients,
      transform: readings,
      hooks: {
        async onStep(step, context) {
          if (step !== 'after-stage-write' || context.chunk !== 1) return;
          reached();
          await held;
        },
      },
    }).processEvent(mskEvent(specs));
    await waiting;
    // The retry, from a cold start: no belief of what the zombie committed.
    forgetStateKnowledge();
    const retry = await new Processor({ settings, clients: res.clients, transform: readings }).processEvent(
      mskEvent(specs),
    );
    resume();
    const late = await zombie;
    expect(retry.partitions[0]).toMatchObject({ duplicatesByOffset: 3, stagedOffset: 9 });
    expect(late.partitions[0]!.stagedOffset).toBe(9);
    expect(await values(pipeline, 's')).toEqual({ readings: 10, high: 90, last: 'mine-90' });
    for (const offset of [0, 5, 9]) expect(await values(pipeline, `own-${offset}b`)).toEqual({ n: 1 });
    expect((await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint()).status).toBe(
      'committed',
    );
    const rows = await readFinalRows({ s3: res.clients.s3, bucket: res.bucket, pipeline });
    expect(rows.map((r) => (r.row.source as { offset: number }).offset).sort((a, b) => a - b)).toEqual([
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
    ]);
  });
});
