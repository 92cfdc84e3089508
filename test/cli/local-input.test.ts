/**
 * `--partitions` of `eos local` and `eos deliver` with an `--input` file: left at its default, the topic has at least
 * as many partitions as the file names, so a file of a 3-partition topic runs without the flag; given, it bounds
 * the file's partitions (a line beyond is refused, naming it). The file is read once either way.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { partitionsFromInput, readInput } from '../../cli/local-input.ts';

function file(partitions: readonly number[]): string {
  const path = join(mkdtempSync(join(tmpdir(), 'eos-input-')), 'in.jsonl');
  writeFileSync(
    path,
    partitions.map((partition) => JSON.stringify({ partition, key: null, value: 'v' })).join('\n'),
  );
  return path;
}

/** The partitions of a run over these arguments, as `eos local` and `eos deliver` decide them. */
async function partitions(args: string[]): Promise<number> {
  const command = new Command()
    .option('--input <file>')
    .option('--partitions <p>', 'partitions', Number, 2)
    .exitOverride();
  command.parse(['node', 'eos', ...args]);
  const raw = command.opts<{ input?: string; partitions: number }>();
  if (raw.input === undefined) {
    expect(partitionsFromInput(raw, command)).toBe(false);
    return raw.partitions;
  }
  return (await readInput(raw.input, raw.partitions, partitionsFromInput(raw, command))).partitions;
}

describe('the partitions of a run over an input file', () => {
  it('are as many as the file names when --partitions is not given, and at least the default', async () => {
    expect(await partitions(['--input', file([0, 2, 1, 2])])).toBe(3);
    expect(await partitions(['--input', file([0])])).toBe(2);
    expect(await partitions([])).toBe(2);
  });

  it('are what --partitions says when it is given, and a line beyond them is refused, naming it', async () => {
    expect(await partitions(['--input', file([0, 1]), '--partitions', '2'])).toBe(2);
    await expect(partitions(['--input', file([0, 4]), '--partitions', '2'])).rejects.toThrow(
      /in\.jsonl:2: partition 4 is out of range \(--partitions 2: 0\.\.1\)/,
    );
  });

  it('keep the records of the one read', async () => {
    const { records } = await readInput(file([0, 2]), 2, true);
    expect(records.map((record) => record.partition)).toEqual([0, 2]);
  });
});
