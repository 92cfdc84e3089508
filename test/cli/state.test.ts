/**
 * `eos state`: the keyed state a pipeline holds, read from the ledger table as an operator types it: one key, a
 * prefix of keys, text or JSON, each value with its operation. Bad input exits 2 with one line; a table that is
 * not there exits 3. Real DynamoDB Local.
 */
import { Command } from 'commander';
import { beforeAll, describe, expect, it } from 'vitest';
import { reportFailure } from '../../cli/failures.ts';
import { registerStateCommand } from '../../cli/state.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { mskEvent } from '../support/msk.ts';

let res: TestResources;
let settings: Settings;

/** Value `<sensor> <celsius> <at>`: per sensor a count, the lowest, the highest and the last reading. */
const readings: Transform = {
  name: 'readings',
  apply(record) {
    const [sensor = '', c = '0', at = '0'] = Buffer.from(record.rawValue ?? '', 'base64')
      .toString()
      .split(' ');
    const celsius = Number(c);
    return {
      kind: 'ok',
      rows: [],
      state: [
        {
          key: sensor.startsWith('s-') ? `sensor#${sensor}` : `other#${sensor}`,
          fields: { site: 'lab' },
          add: { readings: 1 },
          min: { low: celsius },
          max: { high: celsius },
          latest: { last: { value: celsius, at: Number(at) } },
        },
      ],
    };
  },
};

beforeAll(async () => {
  res = await freshResources('clistate');
  settings = settingsIn(res, 'clistate', { idempotencyKey: 'none' });
  await createProcessor({ settings, clients: res.clients, transform: readings }).processEvent(
    mskEvent([
      { partition: 0, offset: 0, value: 's-1 21.5 1796029200000' },
      { partition: 0, offset: 1, value: 's-1 -4 1796029260000' },
      { partition: 1, offset: 0, value: 's-2 7 1796029200000' },
      { partition: 1, offset: 1, value: 'other 1 1' },
    ]),
  );
});

interface Run {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/** `eos state …` as `main()` runs a command: commander's usage errors and the command's failures as exit codes. */
async function state(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  const out: string[] = [];
  const err: string[] = [];
  const program = new Command('eos');
  registerStateCommand(program, {
    write: (text) => out.push(text),
    env: { ...process.env, EOS_LEDGER_TABLE: '', EOS_PIPELINE_ID: '', ...env },
  });
  for (const command of [program, ...program.commands]) {
    command.exitOverride();
    command.configureOutput({ writeErr: (text) => err.push(text), writeOut: (text) => out.push(text) });
  }
  let code = 0;
  try {
    await program.parseAsync(['node', 'eos', 'state', ...args]);
  } catch (error) {
    code = reportFailure(error, (text) => err.push(text), false);
  }
  return { code, out: out.join(''), err: err.join('') };
}

const base = () => ['--table', res.table, '--pipeline', settings.pipelineId];

describe('eos state', () => {
  it('prints one key’s values with their operations', async () => {
    const run = await state([...base(), '--key', 'sensor#s-1']);
    expect(run).toMatchObject({ code: 0, err: '' });
    expect(run.out).toBe(
      [
        'sensor#s-1',
        '  site      "lab"  set',
        '  readings  2      add',
        '  low       -4     min',
        '  high      21.5   max',
        '  last      -4     latest, at 1796029260000',
        '',
      ].join('\n'),
    );
  });

  it('prints JSON: one object for --key (null when there is none), an array for --prefix, sorted by key', async () => {
    const one = await state([...base(), '--key', 'sensor#s-2', '--json']);
    expect(one.code).toBe(0);
    expect(JSON.parse(one.out)).toEqual({
      key: 'sensor#s-2',
      values: { site: 'lab', readings: 1, low: 7, high: 7, last: 7 },
      operations: { site: 'set', readings: 'add', low: 'min', high: 'max', last: 'latest' },
      latestAt: { last: 1796029200000 },
    });
    expect(JSON.parse((await state([...base(), '--key', 'sensor#none', '--json'])).out)).toBeNull();
    const many = await state([...base(), '--prefix', 'sensor#', '--json']);
    expect(many.code).toBe(0);
    expect((JSON.parse(many.out) as Array<{ key: string }>).map((item) => item.key)).toEqual([
      'sensor#s-1',
      'sensor#s-2',
    ]);
    const all = JSON.parse((await state([...base(), '--prefix', '', '--json'])).out) as unknown[];
    expect(all).toHaveLength(3);
  });

  it('says so, in one line, when a key holds no state', async () => {
    expect(await state([...base(), '--key', 'sensor#none'])).toEqual({
      code: 0,
      out: `no state item "sensor#none" in pipeline ${settings.pipelineId}\n`,
      err: '',
    });
    expect((await state([...base(), '--prefix', 'nothing#'])).out).toBe(
      `no state item whose key starts with "nothing#" in pipeline ${settings.pipelineId}\n`,
    );
  });

  it('reads the table and pipeline from EOS_LEDGER_TABLE and EOS_PIPELINE_ID', async () => {
    const run = await state(['--key', 'sensor#s-2'], {
      EOS_LEDGER_TABLE: res.table,
      EOS_PIPELINE_ID: settings.pipelineId,
    });
    expect(run.code).toBe(0);
    expect(run.out).toMatch(/^sensor#s-2\n/);
  });

  it.each([
    [['--key', 'k'], /^error: --table is required \(or set EOS_LEDGER_TABLE\)\n$/],
    [['--table', 't'], /^error: one of --key or --prefix is required\n$/],
    [['--table', 't', '--key', 'k', '--prefix', 'p'], /^error: --key and --prefix cannot be combined\n$/],
    [['--table', 't', '--key', ''], /^error: --key is empty: a state key has at least one character\n$/],
    [['--table', 't', '--key', 'k', '--endpoint', 'ftp://x'], /--endpoint.*expected an http\(s\) URL/],
    [['--table', 't', '--key', 'k', '--limit', '0'], /--limit.*expected an integer in 1\.\./],
  ])('exits 2 with one line for bad input: %j', async (args, message) => {
    const run = await state(args);
    expect(run.code).toBe(2);
    expect(run.err).toMatch(message);
    expect(run.err.trim().split('\n')).toHaveLength(1);
    expect(run.out).toBe('');
  });

  it('stops a prefix listing at --limit items and says so', async () => {
    const run = await state([...base(), '--prefix', 'sensor#', '--limit', '1']);
    expect(run.code).toBe(0);
    expect(run.out).toMatch(/^sensor#s-1\n/);
    expect(run.out).not.toContain('sensor#s-2');
    expect(run.out).toMatch(/\(more items: raise --limit\)\n$/);
  });

  it('exits 3 with one line when the table is not there', async () => {
    const run = await state(['--table', 'no-such-table', '--pipeline', 'p', '--key', 'k']);
    expect(run.code).toBe(3);
    expect(run.err).toMatch(
      /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*ResourceNotFoundException/,
    );
    expect(run.err.trim().split('\n')).toHaveLength(1);
  });
});
