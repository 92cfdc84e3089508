/**
 * `--partitions` of `eos local` and `eos deliver` with an `--input` file: left at its default, the topic has at least
 * as many partitions as the file names, so a file of a 3-partition topic runs without the flag; given, it bounds
 * the file's partitions (a line beyond is refused, naming it).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { partitionsFor } from '../../cli/local-input.ts';

function file(partitions: readonly number[]): string {
  const path = join(mkdtempSync(join(tmpdir(), 'eos-input-')), 'in.jsonl');
  writeFileSync(
    path,
    partitions.map((partition) => JSON.stringify({ partition, key: null, value: 'v' })).join('\n'),
  );
  return path;
}

async function partitions(args: string[]): Promise<number> {
  const command = new Command()
    .option('--input <file>')
    .option('--partitions <p>', 'partitions', Number, 2)
    .exitOverride();
  command.parse(['node', 'eos', ...args]);
  return partitionsFor(command.opts<{ input?: string; partitions: number }>(), command);
}

describe('the partitions of a run over an input file', () => {
  it('are as many as the file names when --partitions is not given, and at least the default', async () => {
    expect(await partitions(['--input', file([0, 2, 1, 2])])).toBe(3);
    expect(await partitions(['--input', file([0])])).toBe(2);
    expect(await partitions([])).toBe(2);
  });

  it('are what --partitions says when it is given, even when the file names more', async () => {
    expect(await partitions(['--input', file([0, 4]), '--partitions', '2'])).toBe(2);
  });

  it('stay at the default when the file cannot be read: reading it for the run names what is wrong', async () => {
    expect(await partitions(['--input', '/nonexistent/in.jsonl'])).toBe(2);
  });
});
