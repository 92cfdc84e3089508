import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { type Command, CommanderError } from 'commander';
import { describe, expect, it, vi } from 'vitest';
import { buildProgram } from '../../cli/eos.ts';
import { runVerifyCommand } from '../../cli/verify.ts';
import type { RunReport } from '../../local/runner.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';

function program(deps: Parameters<typeof buildProgram>[0] = {}) {
  const errors: string[] = [];
  const root = buildProgram(deps);
  const quiet = (command: Command) =>
    command.exitOverride().configureOutput({ writeErr: (text) => errors.push(text), writeOut: () => {} });
  quiet(root);
  root.commands.forEach(quiet);
  return { root, errors };
}

/** Runs `eos local …` without starting anything real; returns what it wrote and whether parts were started. */
async function local(args: string[]) {
  const startParts = vi.fn(async () => ({ env: {}, stop: async () => {} }));
  const stderr: string[] = [];
  const { root, errors } = program({
    local: { startParts, writeError: (t) => stderr.push(t), progress: false },
  });
  let thrown: unknown;
  try {
    await root.parseAsync(['node', 'eos', 'local', ...args]);
  } catch (error) {
    thrown = error;
  }
  return { thrown, text: [...errors, ...stderr].join(''), started: startParts.mock.calls.length > 0 };
}

function tempFile(name: string, text: string): string {
  const file = join(mkdtempSync(join(tmpdir(), 'eos-cli-')), name);
  writeFileSync(file, text);
  return file;
}

describe('eos local: bad input stops before anything runs, naming the option or line', () => {
  it.each([
    [['--faults', 'crash=0.1,meteor=0.5'], /option '--faults <spec>'.*unknown fault kind "meteor"/],
    [['--faults', 'crash=7'], /option '--faults <spec>'.*rate of crash must be a number in \[0, 1\]/],
    [['--partitions', '0'], /option '--partitions <p>' argument '0' is invalid/],
    [['--records', 'many'], /option '--records <n>' argument 'many' is invalid/],
    [
      ['--guarantee', 'mostly-once'],
      /option '--guarantee <g>'.*expected one of exactly-once, at-least-once, none/,
    ],
    [['--seed', '-1'], /option '--seed <s>' argument '-1' is invalid/],
    [['--checkpoint-interval', '0'], /option '--checkpoint-interval <ms>' argument '0' is invalid/],
  ])('rejects %j', async (args, message) => {
    const { thrown, text, started } = await local(args);
    expect(thrown).toBeInstanceOf(CommanderError);
    expect(text).toMatch(message);
    expect(started).toBe(false);
  });

  it.each([
    ['{"partition":0,"key":null,"value":"a"}\n{"partition":0,"key":null,', /bad\.jsonl:2: not valid JSON/],
    ['{"partition":0,"key":null,"value":"a","colour":"red"}\n', /bad\.jsonl:1: unknown field\(s\) "colour"/],
    ['{"partition":0,"key":7,"value":"a"}\n', /bad\.jsonl:1: "key": /],
    [
      '\n{"partition":3,"key":null,"value":"a"}\n',
      /bad\.jsonl:2: partition 3 is out of range \(--partitions 2: 0\.\.1\)/,
    ],
    ['{"partition":0,"key":null,"value":"a","headers":{"h":1}}\n', /bad\.jsonl:1: "headers\.h": /],
    ['', /bad\.jsonl: holds no records/],
  ])('rejects the input file %j', async (text, message) => {
    const { text: output, started } = await local([
      '--input',
      tempFile('bad.jsonl', text),
      '--partitions',
      '2',
    ]);
    expect(output).toMatch(message);
    expect(started).toBe(false);
  });

  it('rejects an unreadable file and --records together with --input', async () => {
    expect((await local(['--input', '/nonexistent/in.jsonl'])).text).toMatch(
      /in\.jsonl: cannot be read \(ENOENT\)/,
    );
    const file = tempFile('ok.jsonl', '{"partition":0,"key":null,"value":"a"}\n');
    const both = await local(['--input', file, '--records', '5']);
    expect(both.text).toMatch(/--records: cannot be combined with --input/);
    expect(both.started).toBe(false);
  });
});

describe('eos local and eos verify on the local parts', () => {
  it('runs, reports (table and JSON), exports for outside tools, and verifies the bucket', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'eos-run-'));
    const out: string[] = [];
    const { root } = program({
      local: {
        startParts: async () => ({ env: {}, stop: async () => {} }),
        write: (t) => out.push(t),
        progress: false,
      },
    });
    const args = ['--records', '400', '--partitions', '3', '--seed', '7', '--checkpoint-interval', '300'];
    await root.parseAsync([
      'node',
      'eos',
      'local',
      ...args,
      '--export',
      dir,
      '--report',
      join(dir, 'report.json'),
    ]);
    expect(process.exitCode).toBe(0);
    const text = out.join('');
    expect(text).toMatch(/records in {2,}400/);
    expect(text).toMatch(/verdict {2,}EXACTLY-ONCE/);
    const report = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as RunReport;
    expect(report).toMatchObject({
      verdict: 'exactly-once',
      records: { in: 400 },
      outcome: { lost: 0, duplicated: 0 },
    });

    // The export can be checked with nothing but the file system and gunzip.
    const finalDir = join(dir, 'bucket', 'orders', 'final');
    const manifests = readdirSync(join(dir, 'bucket', 'orders', '_manifests'));
    expect(manifests.length).toBe(report.verify.manifests);
    const rows = readdirSync(join(finalDir, 'output'), { recursive: true })
      .map(String)
      .filter((f) => f.endsWith('.ndjson.gz'))
      .flatMap((f) =>
        gunzipSync(readFileSync(join(finalDir, 'output', f)))
          .toString()
          .trim()
          .split('\n'),
      );
    expect(rows).toHaveLength(report.records.committed);
    const aggregates = JSON.parse(readFileSync(join(dir, 'aggregates.json'), 'utf8')) as Array<
      Record<string, unknown>
    >;
    const total = aggregates.reduce((n, a) => n + Number(a.count), 0);
    expect(total).toBe(report.records.committed);
    expect(aggregates[0]).toEqual({
      customerId: expect.any(String),
      currency: expect.any(String),
      count: expect.any(Number),
      totalMinor: expect.any(Number),
    });

    const progress: string[] = [];
    const verified = await runVerifyCommand(
      { bucket: 'eos-local', prefix: 'orders/final' },
      { write: () => {}, writeError: (t) => progress.push(t), progressIntervalMs: 0 },
    );
    expect(verified.exitCode).toBe(0);
    // Progress on stderr as it goes (a line per step here; every 3 s by default), ending at the totals.
    const { manifests: manifestCount, files } = verified.result;
    expect(progress).toContain(`progress: ${manifestCount}/${manifestCount} manifests read\n`);
    expect(progress.at(-1)).toBe(`progress: ${files}/${files} objects checked\n`);
    expect(progress.length).toBe(manifestCount + files);
    await createAwsClients().s3.send(
      new PutObjectCommand({ Bucket: 'eos-local', Key: 'orders/final/output/stray.ndjson', Body: '{}\n' }),
    );
    const lines: string[] = [];
    const broken = await runVerifyCommand(
      { bucket: 'eos-local', prefix: 'orders/final/' },
      { write: (t) => lines.push(t) },
    );
    expect(broken.exitCode).toBe(1);
    expect(lines.join('')).toMatch(
      /FAILED: 1 problem\(s\).*\n {2}- \[unlisted-object\] orders\/final\/output\/stray\.ndjson/,
    );
    process.exitCode = 0;
    expect(existsSync(join(dir, 'bucket'))).toBe(true);
    // Seconds alone; minutes when the 20,000-partition and 5,000-file tests share the two cores.
  }, 300_000);
});

describe('bin/eos.mjs', () => {
  it('runs the CLI through tsx: help lists the commands, a bad option exits 2 (bad usage) naming it', () => {
    const help = spawnSync(process.execPath, ['bin/eos.mjs', '--help'], { encoding: 'utf8' });
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(
      /local \[options\][\s\S]*verify \[options\][\s\S]*read \[options\][\s\S]*status \[options\]/,
    );
    const bad = spawnSync(process.execPath, ['bin/eos.mjs', 'local', '--faults', 'meteor=1'], {
      encoding: 'utf8',
    });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/option '--faults <spec>' argument 'meteor=1' is invalid/);
    const localHelp = spawnSync(process.execPath, ['bin/eos.mjs', 'local', '--help'], { encoding: 'utf8' });
    expect(localHelp.status).toBe(0);
    expect(localHelp.stdout).toMatch(/--fail-on-dead-letter +exit 1 when any record was dead-lettered/);
    expect(localHelp.stdout).toMatch(/Exit codes: 0 .*; 1 .*\n.*; 2 bad usage/);
    // Three tsx start-ups: seconds alone, more on a loaded machine.
  }, 120_000);
});
