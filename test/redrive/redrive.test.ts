/**
 * Exactly-once dead-letter redrive (shared/redrive/redrive.ts): after a transform is fixed, its dead
 * letters go back through the exactly-once path into a redrive lane; each fixed record lands in the output once,
 * however often the redrive runs or crashes; one that fails again stays dead-lettered; a second run changes
 * nothing. Real DynamoDB Local and S3 server; the coordinator runs its real steps.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { Settings } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { createProcessor, type ProcessorStep } from '../../shared/processor/processor.ts';
import { type RedriveStep, redrive } from '../../shared/redrive/redrive.ts';
import { readCommitted, readManifests } from '../../shared/sink/reader.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import { mskEvent, orderRecords, type RecordSpec } from '../support/msk.ts';
import { committedOffsets } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rd');
});

const orders = builtinTransform('orders');

/** The transform with a bug: it rejects every order whose offset ends in 7. Fixed: `orders` itself. */
const buggy: Transform = {
  name: 'orders-buggy',
  apply(record: DecodedRecord) {
    if (record.offset % 10 === 7) return { kind: 'poison', error: 'bug: offsets ending in 7 rejected' };
    return orders.apply(record);
  },
};

function settingsFor(): Settings {
  return settingsIn(res, 'rd', { maxTransactionItems: 12 });
}

/** 30 orders on each of two partitions, and a record that is poison for any transform (not JSON) at offset 30. */
function input(): RecordSpec[] {
  return [0, 1].flatMap((partition) => [
    ...orderRecords(partition, 0, 30),
    { partition, offset: 30, value: '{"not json', headers: { 'idempotency-key': `bad-${partition}` } },
  ]);
}

/** Committed rows per lane (from the manifests' entries) and stream, as `lane#partition@offset`. */
async function committedByLane(settings: Settings) {
  const out: Record<string, string[]> = { output: [], deadletter: [] };
  for await (const manifest of readManifests({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    for (const file of manifest.files) {
      for (let offset = file.firstOffset; offset <= file.lastOffset; offset++) {
        out[file.stream]!.push(`${file.topic}#${file.partition}@${offset}`);
      }
    }
  }
  return out;
}

async function manifestCount(settings: Settings): Promise<number> {
  let count = 0;
  for await (const _ of readManifests({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  }))
    count++;
  return count;
}

/** Stages the input with the buggy transform and commits it: 3 bug victims and 1 genuine poison per partition. */
async function withDeadLetters(): Promise<Settings> {
  const settings = settingsFor();
  await createProcessor({ settings, clients: res.clients, transform: buggy }).processEvent(mskEvent(input()));
  await checkpoint(res, settings);
  const dead = await committedOffsets(res.clients, settings, 'deadletter');
  expect(dead.map((row) => `${row.partition}@${row.offset}`).sort()).toEqual(
    [
      'orders#0@17',
      'orders#0@27',
      'orders#0@30',
      'orders#0@7',
      'orders#1@17',
      'orders#1@27',
      'orders#1@30',
      'orders#1@7',
    ].sort(),
  );
  return settings;
}

/** The end state after a successful redrive of `withDeadLetters`: every order once, the poison still dead. */
async function expectRedriven(settings: Settings): Promise<void> {
  const rows = await committedOffsets(res.clients, settings);
  const byPartition = (p: number) =>
    rows
      .filter((row) => row.partition === `orders#${p}`)
      .map((row) => row.offset)
      .sort((a, b) => a - b);
  const all = Array.from({ length: 30 }, (_, i) => i);
  expect(byPartition(0)).toEqual(all);
  expect(byPartition(1)).toEqual(all);
  const lanes = await committedByLane(settings);
  const redriven = lanes.output!.filter((at) => at.startsWith('orders~r'));
  // Entry ranges tile the lane's offsets: the rows themselves are 7, 17, 27 (checked above by lineage).
  expect(new Set(redriven.map((at) => at.split('@')[0]))).toEqual(new Set(['orders~r1#0', 'orders~r1#1']));
  const dead = await committedOffsets(res.clients, settings, 'deadletter');
  expect(dead).toHaveLength(8); // the original dead letters; the poison failed again for the same reason: no new row
  const result = await verifySink({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  });
  expect(result.problems).toEqual([]);
}

describe('redrive', () => {
  it('sends every fixed record through once; the poison stays dead-lettered; a second run changes nothing', async () => {
    const settings = await withDeadLetters();
    const first = await redrive({ settings, clients: res.clients, transform: orders });
    expect(
      first.partitions.map((p) => [p.lane, p.partition, p.outcome, p.round, p.sent, p.unchanged]),
    ).toEqual([
      ['orders', 0, 'redriven', 1, 3, 1],
      ['orders', 1, 'redriven', 1, 3, 1],
    ]);
    expect(first.partitions[0]!.staged).toEqual({ output: 3, deadLettered: 0 });
    // Before the round is committed, another run waits rather than redrive the same records again.
    const early = await redrive({ settings, clients: res.clients, transform: orders });
    expect(early.partitions.map((p) => p.outcome)).toEqual(['waiting', 'waiting']);
    await checkpoint(res, settings);
    await expectRedriven(settings);
    const manifests = await manifestCount(settings);
    const again = await redrive({ settings, clients: res.clients, transform: orders });
    expect(again.partitions.map((p) => [p.outcome, p.sent])).toEqual([
      ['nothing', 0],
      ['nothing', 0],
    ]);
    await checkpoint(res, settings);
    expect(await manifestCount(settings)).toBe(manifests);
    await expectRedriven(settings);
  });

  it('a record that fails again for a new reason is dead-lettered again in the redrive lane, once', async () => {
    const settings = await withDeadLetters();
    const stricter: Transform = {
      name: 'orders-stricter',
      apply(record) {
        if (record.offset === 30) return { kind: 'poison', error: 'still not JSON (new reason)' };
        return orders.apply(record);
      },
    };
    await redrive({ settings, clients: res.clients, transform: stricter });
    await checkpoint(res, settings);
    const again = await redrive({ settings, clients: res.clients, transform: stricter });
    expect(again.partitions.map((p) => p.outcome)).toEqual(['nothing', 'nothing']);
    await checkpoint(res, settings);
    const dead: string[] = [];
    for await (const { file, row } of readCommitted({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
      stream: 'deadletter',
    })) {
      dead.push(
        `${file.topic}#${file.partition}@${(row.source as { offset: number }).offset}: ${String(row.error)}`,
      );
    }
    expect(dead.filter((at) => at.startsWith('orders~r1')).sort()).toEqual([
      'orders~r1#0@30: still not JSON (new reason)',
      'orders~r1#1@30: still not JSON (new reason)',
    ]);
    // The original dead letters stay where they are (nothing of the old lane is rewritten).
    expect(dead.filter((at) => at.startsWith('orders#'))).toHaveLength(8);
  });

  const processorSteps: ProcessorStep[] = [
    'before-stage-write',
    'after-stage-write',
    'after-transaction',
    'before-return',
  ];
  const redriveSteps: RedriveStep[] = ['after-read', 'after-batch', 'before-close'];
  for (const step of [
    ...processorSteps.map((s) => `processor:${s}`),
    ...redriveSteps.map((s) => `redrive:${s}`),
  ]) {
    it(`a crash at ${step}, then the run again (and a checkpoint in between or not): every record once`, async () => {
      const settings = await withDeadLetters();
      const [where, name] = step.split(':') as ['processor' | 'redrive', string];
      let crashes = 0;
      const crash = () => {
        crashes++;
        throw new InjectedCrashError(step);
      };
      const hooks =
        where === 'processor'
          ? { processor: { onStep: (s: ProcessorStep) => (s === name ? crash() : undefined) } }
          : { onStep: (s: RedriveStep) => (s === name ? crash() : undefined) };
      // Small batches: a crash lands between batches of one partition's round.
      await expect(
        redrive({ settings, clients: res.clients, transform: orders, batchSize: 2, hooks }),
      ).rejects.toThrow(InjectedCrashError);
      expect(crashes).toBe(1);
      if (name.length % 2 === 0) await checkpoint(res, settings); // sometimes a checkpoint commits part of the round first
      const resumed = await redrive({ settings, clients: res.clients, transform: orders, batchSize: 2 });
      expect(resumed.partitions.every((p) => p.outcome === 'redriven' && p.round === 1)).toBe(true);
      await checkpoint(res, settings);
      await expectRedriven(settings);
      const again = await redrive({ settings, clients: res.clients, transform: orders });
      expect(again.partitions.map((p) => p.outcome)).toEqual(['nothing', 'nothing']);
    });
  }
});
