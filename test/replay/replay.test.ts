/**
 * Replay into a new generation (shared/replay/): a range reprocessed with a changed transform lands in
 * a generation lane that readers ignore until a manifest switches to it; from that manifest on, each record of
 * the range is read from the new generation, and never from both or neither. Real DynamoDB Local and S3 server;
 * the coordinator runs its real steps; the replay mapping is the processor in replay mode fed the partition from
 * its start, as a second event source mapping would.
 */
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { DeleteCommand, DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock, systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { createProcessor, type ProcessorStep } from '../../shared/processor/processor.ts';
import { queryCommitted } from '../../shared/query/query.ts';
import { bucketSource } from '../../shared/query/sources.ts';
import { planReplay, replayStatus, requestSwitch } from '../../shared/replay/replay.ts';
import { ReplayStore } from '../../shared/replay/store.ts';
import { manifestKey } from '../../shared/sink/layout.ts';
import type { Manifest } from '../../shared/sink/manifest.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { readManifests } from '../../shared/sink/reader.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import ordersDefinition from '../../shared/transforms/orders.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { mskEvent, orderRecords, type RecordSpec } from '../support/msk.ts';
import { committedOffsets } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rp');
});

const orders = builtinTransform('orders');

/** The changed transform: every row says which version wrote it. */
const ordersV2: Transform = {
  name: 'orders-v2',
  apply(record: DecodedRecord) {
    const result = orders.apply(record);
    if (result.kind !== 'ok') return result;
    return { ...result, rows: result.rows.map((row) => ({ ...row, version: 2 })) };
  },
};

function input(): RecordSpec[] {
  return [0, 1].flatMap((partition) => orderRecords(partition, 0, 30));
}

async function checkpoint(settings: Settings): Promise<string> {
  const outcome = await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint();
  expect(['committed', 'empty']).toContain(outcome.status);
  return outcome.status;
}

/** What readers see: per `topic#partition`, offset → the version of its one row ('v1' or 'v2'); fails on two. */
async function readerView(settings: Settings): Promise<Record<string, Record<number, string>>> {
  const view: Record<string, Record<number, string>> = {};
  for (const { partition, offset, row } of await committedOffsets(res.clients, settings)) {
    view[partition] ??= {};
    expect(view[partition]![offset], `${partition}@${offset} read twice`).toBeUndefined();
    view[partition]![offset] = row.version === 2 ? 'v2' : 'v1';
  }
  return view;
}

function expected(replayed: (partition: number, offset: number) => boolean) {
  return Object.fromEntries(
    [0, 1].map((p) => [
      `orders#${p}`,
      Object.fromEntries(Array.from({ length: 30 }, (_, o) => [o, replayed(p, o) ? 'v2' : 'v1'])),
    ]),
  );
}

/** The live pipeline stages and commits the input with `orders`. */
async function live(): Promise<Settings> {
  const settings = settingsIn(res, 'rp', { maxTransactionItems: 12 });
  await createProcessor({ settings, clients: res.clients, transform: orders }).processEvent(
    mskEvent(input()),
  );
  await checkpoint(settings);
  return settings;
}

function replayProcessor(settings: Settings, generation: number, onStep?: (step: ProcessorStep) => void) {
  return createProcessor({
    settings: { ...settings, replayGeneration: generation },
    clients: res.clients,
    transform: ordersV2,
    ...(onStep ? { hooks: { onStep } } : {}),
  });
}

const target = (settings: Settings) => ({
  clients: res.clients,
  table: settings.ledgerTable,
  pipeline: settings.pipelineId,
});

describe('replay into a new generation', () => {
  it('readers see the old generation until the switch, then the new one for the range, each record once', async () => {
    const settings = await live();
    const { plan, skipped } = await planReplay({
      ...target(settings),
      topic: 'orders',
      fromOffset: 10,
      toOffset: 19,
      clock: systemClock,
    });
    expect(skipped).toEqual([]);
    expect(plan.generation).toBe(1);
    expect(plan.ranges).toEqual([
      { lane: 'orders', partition: 0, from: 10, to: 19 },
      { lane: 'orders', partition: 1, from: 10, to: 19 },
    ]);
    // The replay mapping reads each partition from its start, in batches, as the second mapping would.
    const replay = replayProcessor(settings, 1);
    for (const from of [0, 8, 16, 24]) {
      const batch = input().filter((r) => r.offset >= from && r.offset < from + 8);
      await replay.processEvent(mskEvent(batch));
    }
    await checkpoint(settings);
    // Staged and committed, but not switched: readers see only the old generation.
    expect(await readerView(settings)).toEqual(expected(() => false));
    const [status] = await replayStatus(target(settings));
    expect(status).toMatchObject({ phase: 'staging', staged: true, committed: true });
    // The first record after the range moved the lane's fence past it, and nothing later was staged there.
    expect(status!.ranges.map((r) => r.stagedOffset)).toEqual([20, 20]);

    expect(await requestSwitch(target(settings), 1, systemClock)).toBe('requested');
    expect(await requestSwitch(target(settings), 1, systemClock)).toBe('already-requested');
    // An idle pipeline still gets the checkpoint that switches.
    expect(await checkpoint(settings)).toBe('committed');
    expect(await readerView(settings)).toEqual(expected((_, o) => o >= 10 && o <= 19));
    const manifests = [];
    for await (const m of readManifests({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
    }))
      manifests.push(m);
    expect(manifests.map((m) => m.generations?.map((g) => g.generation) ?? [])).toEqual([[], [], [1]]);
    const [after] = await replayStatus(target(settings));
    expect(after).toMatchObject({ phase: 'switched' });
    expect(after!.plan.switchedIn).toBe(3);
    expect(await requestSwitch(target(settings), 1, systemClock)).toBe('already-switched');
    // Switched once: the next checkpoint has nothing to do.
    expect(await checkpoint(settings)).toBe('empty');
    const verified = await verifySink({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
    });
    expect(verified.problems).toEqual([]);
    // eos verify checks the switch against its manifest's own cut: a manifest edited to switch early is flagged.
    const key = manifestKey(settings.pipelineId, 3);
    const third = JSON.parse(
      (await getBytes(res.clients.s3, settings.bucket, key))!.toString('utf8'),
    ) as Manifest;
    const early = {
      ...third,
      generations: [
        {
          generation: 1,
          ranges: [{ lane: 'orders', partition: 0, from: 10, to: 25 }, third.generations![0]!.ranges[1]!],
        },
      ],
    };
    await res.clients.s3.send(
      new PutObjectCommand({ Bucket: settings.bucket, Key: key, Body: JSON.stringify(early) }),
    );
    const tampered = await verifySink({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
    });
    expect(tampered.problems.map((p) => p.kind)).toEqual(['generation-switch']);
    expect(tampered.problems[0]!.message).toMatch(/but its cut has orders~g1#0 only through 20/);
  });

  it('a switch requested early waits until every range is staged and committed', async () => {
    const settings = await live();
    await planReplay({ ...target(settings), topic: 'orders', fromOffset: 5, clock: systemClock });
    expect(await requestSwitch(target(settings), 1, systemClock)).toBe('requested');
    const replay = replayProcessor(settings, 1);
    // Partition 0 fully, partition 1 only up to offset 14.
    await replay.processEvent(mskEvent(input().filter((r) => r.partition === 0)));
    await replay.processEvent(mskEvent(input().filter((r) => r.partition === 1 && r.offset < 15)));
    await checkpoint(settings);
    expect(await readerView(settings)).toEqual(expected(() => false));
    await replay.processEvent(mskEvent(input().filter((r) => r.partition === 1)));
    await checkpoint(settings);
    // `to` defaulted to the last staged offset (29): the lane reaches it with the range's last record.
    expect(await readerView(settings)).toEqual(expected((_, o) => o >= 5));
  });

  it('a crash at every processor step of the replay is redone by the redelivery, nothing twice', async () => {
    const steps: ProcessorStep[] = [
      'after-claims',
      'before-stage-write',
      'after-stage-write',
      'after-transaction',
      'before-return',
    ];
    for (const crashAt of steps) {
      const settings = await live();
      await planReplay({
        ...target(settings),
        topic: 'orders',
        fromOffset: 3,
        toOffset: 25,
        clock: systemClock,
      });
      await requestSwitch(target(settings), 1, systemClock);
      let crashed = false;
      const crashing = replayProcessor(settings, 1, (step) => {
        if (step === crashAt && !crashed) {
          crashed = true;
          throw new InjectedCrashError(step);
        }
      });
      const event = mskEvent(input());
      await expect(crashing.processEvent(event)).rejects.toBeInstanceOf(InjectedCrashError);
      // The mapping delivers the batch again (to a fresh container, and to the same one).
      await replayProcessor(settings, 1).processEvent(event);
      await crashing.processEvent(event);
      await checkpoint(settings);
      expect(await readerView(settings), crashAt).toEqual(expected((_, o) => o >= 3 && o <= 25));
    }
  });

  it('a coordinator crash at every step of the switching checkpoint: readers never see a mix, the switch lands once', async () => {
    const steps = ['begin', 'prepare', 'decide', 'promote', 'commit', 'cleanup'] as const;
    for (const step of steps) {
      for (const phase of ['before', 'after'] as const) {
        const settings = await live();
        await planReplay({
          ...target(settings),
          topic: 'orders',
          fromOffset: 0,
          toOffset: 9,
          clock: systemClock,
        });
        await replayProcessor(settings, 1).processEvent(mskEvent(input()));
        await requestSwitch(target(settings), 1, systemClock);
        // Besides the switch, new live records make the checkpoint a real one (files to prepare and promote).
        await createProcessor({ settings, clients: res.clients, transform: orders }).processEvent(
          mskEvent([0, 1].flatMap((p) => orderRecords(p, 30, 2))),
        );
        const clock = new ManualClock(Date.now());
        let fired = false;
        const crash = (at: string, when: string) => {
          if (at !== step || when !== phase || fired) return;
          fired = true;
          throw new Error(`crash at ${at}:${when}`); // deterministic: the execution fails or aborts
        };
        const local = createLocalCoordinator({
          settings,
          clients: res.clients,
          clock,
          hooks: { beforeStep: (at) => crash(at, 'before'), afterStep: (at) => crash(at, 'after') },
        });
        const view = async () => {
          const all = await committedOffsets(res.clients, settings);
          const rows = all.filter((r) => r.offset < 30);
          const v2 = rows.filter((r) => r.row.version === 2).length;
          // Either nothing of the range switched or all of it, and never a record twice or missing.
          expect(rows, `${step}:${phase}`).toHaveLength(60);
          expect([0, 20], `${step}:${phase}`).toContain(v2);
        };
        await local.runCheckpoint();
        await view();
        for (let i = 0; i < 5; i++) {
          clock.advance(settings.checkpointLeaseSeconds * 1000 + 1);
          if ((await local.runCheckpoint()).status === 'empty') break;
          await view();
        }
        const want = expected((_, o) => o <= 9);
        for (const p of [0, 1]) Object.assign(want[`orders#${p}`]!, { 30: 'v1', 31: 'v1' });
        expect(await readerView(settings), `${step}:${phase}`).toEqual(want);
        const switching: number[] = [];
        for await (const m of readManifests({
          s3: res.clients.s3,
          bucket: settings.bucket,
          pipeline: settings.pipelineId,
        }))
          if (m.generations?.length) switching.push(m.checkpointId);
        expect(switching, `${step}:${phase}`).toHaveLength(1);
        const [status] = await replayStatus(target(settings));
        expect(status!.plan.switchedIn, `${step}:${phase}`).toBe(switching[0]);
      }
    }
  }, 120_000);

  for (const output of [
    { name: 'NDJSON', overrides: {} },
    {
      name: 'Parquet in day folders',
      overrides: {
        outputFormat: 'parquet' as const,
        timePartitioning: 'day' as const,
        outputColumns: [
          ...ordersDefinition.columns,
          { name: 'version', type: 'long' as const, nullable: true },
        ],
      },
    },
  ]) {
    it(`eos query shows the same view (${output.name}), filtering the live files the range cuts`, async () => {
      const settings = settingsIn(res, 'rp', { maxTransactionItems: 12, ...output.overrides });
      await createProcessor({ settings, clients: res.clients, transform: orders }).processEvent(
        mskEvent(input()),
      );
      await checkpoint(settings);
      await planReplay({
        ...target(settings),
        topic: 'orders',
        fromOffset: 7,
        toOffset: 21,
        clock: systemClock,
      });
      await requestSwitch(target(settings), 1, systemClock);
      await replayProcessor(settings, 1).processEvent(mskEvent(input()));
      await checkpoint(settings);
      await checkpoint(settings);
      const query = async () => {
        const lines: string[] = [];
        await queryCommitted({
          source: bucketSource(res.clients.s3, settings.bucket, settings.pipelineId),
          pipeline: settings.pipelineId,
          stream: 'output',
          sql: 'SELECT source."partition" AS p, source."offset" AS o, coalesce(version, 1) AS v FROM output ORDER BY p, o',
          format: 'json',
          write: (text) => lines.push(text),
        });
        return lines
          .join('')
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as { p: number; o: number; v: number });
      };
      const rows = await query();
      const want = [0, 1].flatMap((p) =>
        Array.from({ length: 30 }, (_, o) => ({ p, o, v: o >= 7 && o <= 21 ? 2 : 1 })),
      );
      expect(rows).toEqual(want);
      expect(await readerView(settings)).toEqual(expected((_, o) => o >= 7 && o <= 21));
    });
  }

  it('a plan an operator broke by hand never stops the checkpoints: a malformed one is left out, one deleted after begin commits without its switch', async () => {
    const settings = await live();
    const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
    await doc.send(
      new PutCommand({
        TableName: settings.ledgerTable,
        Item: { ...keys.replayPlan(settings.pipelineId, 9), generation: 9, createdAt: 1, ranges: 'garbage' },
      }),
    );
    await createProcessor({ settings, clients: res.clients, transform: orders }).processEvent(
      mskEvent(orderRecords(0, 30, 2)),
    );
    expect(await checkpoint(settings)).toBe('committed');
    // A well-formed plan, staged and requested, deleted between begin and commit.
    await new ReplayStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId).create(
      1,
      [{ lane: 'orders', partition: 1, from: 0, to: 9 }],
      Date.now(),
    );
    await replayProcessor(settings, 1).processEvent(mskEvent(input()));
    await checkpoint(settings);
    await new ReplayStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId).requestSwitch(
      1,
      Date.now(),
    );
    const outcome = await createLocalCoordinator({
      settings,
      clients: res.clients,
      hooks: {
        beforeStep: async (step) => {
          if (step === 'commit')
            await doc.send(
              new DeleteCommand({
                TableName: settings.ledgerTable,
                Key: keys.replayPlan(settings.pipelineId, 1),
              }),
            );
        },
      },
    }).runCheckpoint();
    expect(outcome.status).toBe('committed');
    const manifests = [];
    for await (const m of readManifests({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
    }))
      manifests.push(m);
    expect(manifests.at(-1)!.generations).toBeUndefined();
    const view = await readerView(settings);
    expect(Object.values(view['orders#1']!).filter((v) => v === 'v2')).toEqual([]);
  });

  it('refuses a plan for an epoch that is no longer current, and a missing plan, without staging', async () => {
    const settings = await live();
    const missing = replayProcessor(settings, 7);
    await expect(missing.processEvent(mskEvent(input()))).rejects.toThrow(/generation 7 has no plan/);
    // A plan naming epoch 1 while the partition is in epoch 0.
    await new ReplayStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId).create(
      1,
      [{ lane: 'orders~1', partition: 0, from: 0, to: 5 }],
      Date.now(),
    );
    await expect(replayProcessor(settings, 1).processEvent(mskEvent(input()))).rejects.toThrow(
      /in orders now \(a new epoch opened\)/,
    );
    const fences = await replayStatus(target(settings));
    expect(fences[0]!.ranges[0]!.stagedOffset).toBe(-1);
  });

  it('plans refuse bad ranges with clear errors', async () => {
    const settings = await live();
    const plan = (over: Partial<Parameters<typeof planReplay>[0]>) =>
      planReplay({ ...target(settings), topic: 'orders', fromOffset: 0, clock: systemClock, ...over });
    await expect(plan({ topic: 'nope' })).rejects.toThrow(/staged nothing of topic nope/);
    await expect(plan({ fromOffset: 10, toOffset: 5 })).rejects.toThrow(
      /--to-offset 5 is before the start offset 10/,
    );
    await expect(plan({ partitions: [7] })).rejects.toThrow(/partition 7/);
    await expect(plan({ fromOffset: 30 })).rejects.toThrow(/nothing of orders to replay from offset 30/);
    const { skipped } = await plan({ fromOffset: 0, partitions: [0] });
    expect(skipped).toEqual([]);
    // A second plan takes the next generation.
    expect((await plan({ fromOffset: 1 })).plan.generation).toBe(2);
    // The same command again (a re-run after a crash before it printed) finds that plan instead of a third.
    expect(await plan({ fromOffset: 1 })).toMatchObject({ existing: true, plan: { generation: 2 } });
    expect((await replayStatus(target(settings))).map((r) => r.plan.generation)).toEqual([1, 2]);
    // The live processor cannot be configured to write plans: it only reads its own key prefixes (checked in the
    // IAM tests); here, the plan item's key is outside every processor prefix.
    expect(keys.replayPlan(settings.pipelineId, 1).pk).toBe(`${settings.pipelineId}#REPLAY`);
  });
});
