/**
 * `eos epoch`, `eos redrive` and `eos replay` through `main()` (what bin/eos.mjs runs), against the real local parts: what an
 * operator types and reads, the exit codes, and that a second run changes nothing.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import type { Settings } from '../../shared/config/settings.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { eos } from '../support/eos.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('cliops');
});

async function checkpoint(settings: Settings): Promise<void> {
  expect((await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint()).status).toBe(
    'committed',
  );
}

describe('eos epoch', () => {
  it('shows why a partition stopped and whether the stop is confirmed, opens a new epoch once it is, and a second run changes nothing', async () => {
    const settings = settingsIn(res, 'cliops', { idempotencyKey: 'none' });
    const processor = createProcessor({ settings, clients: res.clients });
    await processor.processEvent(mskEvent([...orderRecords(0, 0, 10), ...orderRecords(1, 0, 3)]));
    await expect(processor.processEvent(mskEvent(orderRecords(0, 0, 4, 'gen2')))).rejects.toThrow(
      /went backwards/,
    );
    const base = ['epoch', '--table', res.table, '--pipeline', settings.pipelineId];

    const shown = await eos(base);
    expect(shown.code).toBe(0);
    expect(shown.out).toMatch(
      /^orders-0: epoch 0 \(orders\), fence 9, STOPPED\n {2}stopped .*: batch 0\.\.3 against fence 9: .*\n {2}seen by one invocation only: /m,
    );
    expect(shown.out).toMatch(/eos epoch --start-new --topic orders --partition 0/);
    expect(shown.out).toMatch(/^orders-1: epoch 0 \(orders\), fence 2, running$/m);

    const unconfirmed = await eos([...base, '--start-new', '--topic', 'orders', '--partition', '0']);
    expect(unconfirmed.code).toBe(1);
    expect(unconfirmed.out).toMatch(
      /^orders-0: NOT switched: its stop \(batch 0\.\.3 against fence 9\) was seen by one invocation only; .*--force/,
    );

    // The mapping retries the refused batch in another invocation, which confirms the stop.
    await expect(
      createProcessor({ settings, clients: res.clients }).processEvent(
        mskEvent(orderRecords(0, 0, 4, 'gen2')),
      ),
    ).rejects.toThrow(/went backwards/);
    const confirmed = await eos(base);
    expect(confirmed.code).toBe(0);
    expect(confirmed.out).toMatch(
      /^orders-0: epoch 0 \(orders\), fence 9, STOPPED\n {2}stopped .*: batch 0\.\.3 against fence 9: .*\n {2}confirmed: seen by 2 invocations$/m,
    );

    const switched = await eos([...base, '--start-new', '--topic', 'orders']);
    expect(switched.code).toBe(1); // partition 1 is not stopped: refused without --force
    expect(switched.out).toMatch(/^orders-0: epoch 1 opened; epoch 0 closed at fence 9/m);
    expect(switched.out).toMatch(/^orders-1: NOT switched: epoch 0 is not stopped \(fence 2\); --force/m);

    const again = await eos([...base, '--start-new', '--topic', 'orders', '--partition', '0']);
    expect(again).toMatchObject({
      code: 0,
      out: 'orders-0: epoch 1 has staged nothing yet: left as it is\n',
    });

    await processor.processEvent(mskEvent(orderRecords(0, 0, 4, 'gen2')));
    const json = JSON.parse(
      (await eos([...base, '--json', '--topic', 'orders', '--partition', '0'])).out,
    ) as {
      partitions: Array<{ epoch: number; epochs: Array<{ lane: string; stagedOffset: number }> }>;
    };
    expect(json.partitions[0]!.epoch).toBe(1);
    expect(json.partitions[0]!.epochs.map((e) => [e.lane, e.stagedOffset])).toEqual([
      ['orders', 9],
      ['orders~1', 3],
    ]);
  });

  it('refuses --start-new without --topic and --force without --start-new (exit 2)', async () => {
    expect((await eos(['epoch', '--table', res.table, '--start-new'])).code).toBe(2);
    const force = await eos(['epoch', '--table', res.table, '--force']);
    expect(force).toMatchObject({ code: 2, err: 'error: --force only goes with --start-new\n' });
    expect((await eos(['epoch', '--table', res.table, '--topic', 'bad topic'])).code).toBe(2);
  });
});

describe('eos redrive', () => {
  it('redrives after a fix, waits for the round to commit, then has nothing to do', async () => {
    const orders = builtinTransform('orders');
    const buggy: Transform = {
      name: 'buggy',
      apply: (record: DecodedRecord) =>
        record.offset === 3 ? { kind: 'poison', error: 'bug at 3' } : orders.apply(record),
    };
    const settings = settingsIn(res, 'cliops');
    await createProcessor({ settings, clients: res.clients, transform: buggy }).processEvent(
      mskEvent(orderRecords(0, 0, 6)),
    );
    await checkpoint(settings);
    const args = ['redrive', '--table', res.table, '--bucket', res.bucket, '--pipeline', settings.pipelineId];
    const first = await eos([...args, '--transform', 'orders']);
    expect(first).toMatchObject({ code: 0 });
    expect(first.out).toBe(
      'orders-0: round 1: 1 sent, 1 output rows and 0 dead letters staged; committed by the next checkpoint\n',
    );
    const early = await eos([...args, '--transform', 'orders']);
    expect(early.code).toBe(1);
    expect(early.out).toMatch(/round 1 is not committed yet: run again after the next checkpoint/);
    await checkpoint(settings);
    const later = await eos([...args, '--transform', 'orders', '--json']);
    expect(later.code).toBe(0);
    expect(JSON.parse(later.out)).toMatchObject({
      partitions: [{ lane: 'orders', outcome: 'nothing', sent: 0 }],
    });
    const none = await eos([...args, '--transform', 'orders', '--checkpoint', '1']);
    expect(none.out).toBe('orders-0: nothing to redrive\n');
  });

  it('refuses --all with --checkpoint, and a missing bucket (exit 2)', async () => {
    const both = await eos(['redrive', '--table', 't', '--bucket', 'b', '--all', '--checkpoint', '2']);
    expect(both).toMatchObject({ code: 2, err: 'error: --all and --checkpoint exclude each other\n' });
    const noBucket = await eos(['redrive', '--table', 't']);
    expect(noBucket).toMatchObject({ code: 2, err: 'error: --bucket is required (or set EOS_BUCKET)\n' });
  });
});

describe('eos replay', () => {
  it('plans a generation, shows its progress, requests the switch; readers move at the next checkpoint', async () => {
    const settings = settingsIn(res, 'cliops');
    const records = [...orderRecords(0, 0, 12), ...orderRecords(1, 0, 12)];
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(records));
    await checkpoint(settings);
    const base = ['replay', '--table', res.table, '--pipeline', settings.pipelineId];

    expect(await eos(base)).toMatchObject({ code: 0, out: expect.stringMatching(/^no replay is planned/) });
    const planned = await eos([
      ...base,
      '--topic',
      'orders',
      '--from-offset',
      '4',
      '--to-offset',
      '7',
      '--partitions',
      '1',
    ]);
    expect(planned.code).toBe(0);
    expect(planned.out).toMatch(/^generation 1 planned: 1 partitions\n {2}orders-1: offsets 4\.\.7\n/);
    expect(planned.out).toMatch(/replay prop \{ generation: 1 \}/);

    // Per-partition starts (a point in time, as kafka-get-offsets --time prints it) plan generation 2.
    const perPartition = await eos([
      ...base,
      '--topic',
      'orders',
      '--from-offsets',
      '0=9,1=2',
      '--to-offset',
      '10',
    ]);
    expect(perPartition.out).toMatch(
      /^generation 2 planned: 2 partitions\n {2}orders-0: offsets 9\.\.10\n {2}orders-1: offsets 2\.\.10\n/,
    );

    const staging = await eos(base);
    expect(staging.out).toMatch(
      /^generation 1 \(planned .*\): staging: readers see the earlier generation$/m,
    );
    expect(staging.out).toMatch(
      /^ {2}orders-1: offsets 4\.\.7: staged to -1, committed to -1 \(4 offsets to go\)$/m,
    );

    const requested = await eos([...base, '--switch', '1']);
    expect(requested).toMatchObject({
      code: 0,
      out: expect.stringMatching(/^generation 1: switch requested/),
    });
    await createProcessor({
      settings: { ...settings, replayGeneration: 1 },
      clients: res.clients,
    }).processEvent(mskEvent(records));
    await checkpoint(settings);
    const done = JSON.parse((await eos([...base, '--json'])).out) as {
      replays: Array<{
        phase: string;
        plan: { switchedIn: number };
        ranges: Array<{ committedOffset: number }>;
      }>;
    };
    expect(done.replays[0]).toMatchObject({ phase: 'switched', plan: { switchedIn: 2 } });
    expect(done.replays[0]!.ranges[0]!.committedOffset).toBe(8);
    expect((await eos([...base, '--switch', '1'])).out).toMatch(/readers switched to it already/);
  });

  it('refuses what cannot be planned, with the reason (exit 2)', async () => {
    const base = ['replay', '--table', res.table, '--pipeline', 'nothing-here'];
    expect(await eos([...base, '--topic', 'orders'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/needs --topic and one of --from-offset, --from-offsets/),
    });
    expect(await eos([...base, '--switch', '1', '--topic', 'orders', '--from-offset', '0'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/--switch does not go with/),
    });
    expect(await eos([...base, '--topic', 'orders', '--from-offset', '0'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/has staged nothing of topic orders/),
    });
    expect(await eos([...base, '--switch', '3'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/generation 3 has no replay plan/),
    });
    expect(
      await eos([...base, '--topic', 'orders', '--from-offset', '0', '--partitions', '1,1']),
    ).toMatchObject({
      code: 2,
      err: expect.stringMatching(/named twice/),
    });
    expect(
      await eos([...base, '--topic', 'orders', '--from-offset', '0', '--from-offsets', '0=1']),
    ).toMatchObject({ code: 2, err: expect.stringMatching(/one of --from-offset, --from-offsets/) });
    expect(await eos([...base, '--topic', 'orders', '--from-offsets', '0=1,0=2'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/partition 0 is named twice/),
    });
    expect(await eos([...base, '--topic', 'orders', '--from-offsets', '0:1'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/expected <partition>=<offset>/),
    });
    expect(await eos(['replay', '--pipeline', 'x'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/--table is required/),
    });
  });
});
