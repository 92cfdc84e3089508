/** `eos read` and the committed reader over a pipeline with several committed checkpoints. */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { registerReadCommand } from '../../cli/read.ts';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { exportRun } from '../../local/results.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { finalPrefix } from '../../shared/sink/layout.ts';
import { freshResources, uniqueName } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

function collector(): { out: Writable; lines: () => string[] } {
  const chunks: string[] = [];
  const out = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk.toString('utf8'));
      done();
    },
  });
  return { out, lines: () => chunks.join('').split('\n').filter(Boolean) };
}

describe('eos read', () => {
  it('prints every committed record once as NDJSON, in manifest order, for each stream', async () => {
    const res = await freshResources('read');
    const settings = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: uniqueName('r'),
    });
    const processor = createProcessor({ settings, clients: res.clients });
    const local = createLocalCoordinator({ settings, clients: res.clients });
    await processor.processEvent(mskEvent([...orderRecords(0, 0, 3), ...orderRecords(1, 0, 2)]));
    expect((await local.runCheckpoint()).status).toBe('committed');
    await processor.processEvent(
      mskEvent([...orderRecords(0, 3, 2), { partition: 1, offset: 2, value: 'not json', headers: {} }]),
    );
    expect((await local.runCheckpoint()).status).toBe('committed');
    await processor.processEvent(mskEvent(orderRecords(0, 5, 1)));
    // Staged but not committed: not printed.

    const output = collector();
    const program = new Command().exitOverride();
    registerReadCommand(program, { out: output.out });
    await program.parseAsync(['read', '--bucket', res.bucket, '--pipeline', settings.pipelineId], {
      from: 'user',
    });
    const rows = output
      .lines()
      .map((line) => JSON.parse(line) as { source: { partition: number; offset: number } });
    expect(rows.map((r) => [r.source.partition, r.source.offset])).toEqual([
      [0, 0],
      [0, 1],
      [0, 2],
      [1, 0],
      [1, 1],
      [0, 3],
      [0, 4],
    ]);

    const dead = collector();
    const program2 = new Command().exitOverride();
    registerReadCommand(program2, { out: dead.out });
    await program2.parseAsync(
      ['read', '--bucket', res.bucket, '--pipeline', settings.pipelineId, '--stream', 'deadletter'],
      {
        from: 'user',
      },
    );
    const deadRows = dead
      .lines()
      .map((line) => JSON.parse(line) as { source: { offset: number }; error: string });
    expect(deadRows).toHaveLength(1);
    expect(deadRows[0]!.source.offset).toBe(2);

    // The same from an `eos local --export` folder, once the bucket is gone: the same lines, in the same order.
    const dir = mkdtempSync(join(tmpdir(), 'eos-read-export-'));
    await exportRun(res.clients, res.bucket, finalPrefix(settings.pipelineId), new Map(), dir);
    for (const stream of ['output', 'deadletter']) {
      const fromBucket = collector();
      const fromDir = collector();
      const read = async (out: Writable, where: string[]) => {
        const command = new Command().exitOverride();
        registerReadCommand(command, { out });
        await command.parseAsync(['read', ...where, '--pipeline', settings.pipelineId, '--stream', stream], {
          from: 'user',
        });
      };
      await read(fromBucket.out, ['--bucket', res.bucket]);
      await read(fromDir.out, ['--export-dir', dir]);
      expect(fromDir.lines()).toEqual(fromBucket.lines());
      expect(fromDir.lines().length).toBeGreaterThan(0);
    }
  });

  it('refuses --export-dir with --bucket, and a folder that holds no export of the pipeline', async () => {
    const program = new Command().exitOverride().configureOutput({ writeErr: () => {} });
    registerReadCommand(program);
    await expect(
      program.parseAsync(['read', '--bucket', 'b', '--export-dir', '/tmp'], { from: 'user' }),
    ).rejects.toThrow('--bucket and --export-dir cannot be combined');
    const empty = mkdtempSync(join(tmpdir(), 'eos-read-empty-'));
    const again = new Command().exitOverride().configureOutput({ writeErr: () => {} });
    registerReadCommand(again);
    await expect(
      again.parseAsync(['read', '--export-dir', empty, '--pipeline', 'p1'], { from: 'user' }),
    ).rejects.toThrow(`${empty} holds no export of pipeline p1`);
  });

  it('refuses an unknown stream', async () => {
    const program = new Command().exitOverride().configureOutput({ writeErr: () => {} });
    registerReadCommand(program);
    await expect(
      program.parseAsync(['read', '--bucket', 'b', '--stream', 'nope'], { from: 'user' }),
    ).rejects.toThrow(/nope/);
  });
});
