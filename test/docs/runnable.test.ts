/**
 * Every shell block the docs mark runnable (a fence with the info string `sh runnable`) runs, and exits 0.
 *
 * Blocks come from README.md, CONTRIBUTING.md and docs/*.md. Each runs as one `bash -euo pipefail` script from the
 * repository root, with the environment CONTRIBUTING.md documents: `EOS_BUCKET` and `EOS_LEDGER_TABLE` name a
 * bucket and table on the local parts (the vitest global setup's DynamoDB Local and S3 server) that hold the
 * committed output of a short real pipeline run under the pipeline id `orders`, and the AWS endpoint variables
 * point at those parts. So `eos verify`, `eos read` and `eos status` in the docs run against real committed
 * output, and `eos local` starts its own parts as it does for a user.
 *
 * A block marked `sh runnable laptop` is a runbook drill (docs/operations.md, "Drills on a laptop"): it runs as a
 * user runs it against parts of their own, with the endpoint variables naming the test's parts and
 * `EOS_LEDGER_TABLE`/`EOS_BUCKET` a table and bucket of the drills' own (no other `EOS_*` variable), the drill
 * blocks one after another in the docs' order (the first writes the transform the others use).
 */
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { NO_FAULTS } from '../../local/faults.ts';
import { generateOrders } from '../../local/generator.ts';
import { runLocal } from '../../local/runner.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { freshResources, uniqueName } from '../support/aws.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const RUNNABLE = /^```sh runnable([^\n]*)\n([\s\S]*?)^```$/gm;
/** One block's budget: `eos local` starts DynamoDB Local (a JVM) and the S3 server itself. */
const BLOCK_TIMEOUT_MS = 150_000;
/** A drill runs eight or so commands, each a process of its own. */
const DRILL_TIMEOUT_MS = 300_000;

interface RunnableBlock {
  readonly file: string;
  readonly line: number;
  readonly script: string;
  /** A runbook drill, run against the test's parts as against a user's own (`sh runnable laptop`). */
  readonly laptop: boolean;
}

/** The documents the tour and the guides live in. */
function documentedFiles(): string[] {
  const docs = readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => join('docs', name));
  return ['README.md', 'CONTRIBUTING.md', ...docs.sort()];
}

function runnableBlocks(file: string, text: string): RunnableBlock[] {
  const blocks: RunnableBlock[] = [];
  for (const match of text.matchAll(RUNNABLE)) {
    const line = text.slice(0, match.index).split('\n').length;
    blocks.push({ file, line, script: match[2]!, laptop: /(^|\s)laptop(\s|$)/.test(match[1]!) });
  }
  return blocks;
}

function run(
  script: string,
  env: NodeJS.ProcessEnv,
  timeoutMs = BLOCK_TIMEOUT_MS,
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-euo', 'pipefail', '-c', script], { cwd: root, env });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs - 5_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

const blocks = documentedFiles().flatMap((file) =>
  runnableBlocks(file, readFileSync(join(root, file), 'utf8')),
);

/** What stages in a drill (after `eos local`, which commits what it stages itself). */
const STAGES = /\beos (deliver|redrive|epoch --start-new)\b/;
/** A check of the committed result: verify, read, status, or replay's progress. */
const CHECKS = /\beos (verify|read|status)\b|\beos replay\s*(#|$)/;

/** A drill stages something, commits it with `eos checkpoint`, then checks the result. */
function drillEndsWithCheckpointAndCheck(script: string): boolean {
  const lines = script.split('\n').filter((line) => !line.trim().startsWith('#'));
  const stage = lines.findIndex((line) => STAGES.test(line));
  const checkpoint = lines.findLastIndex((line) => /\beos checkpoint\b/.test(line));
  return stage >= 0 && checkpoint > stage && lines.some((line, i) => i > checkpoint && CHECKS.test(line));
}

/**
 * A directory whose `npx` runs what npx runs for this package's own bin (`eos`: bin/eos.mjs) or for a bin in
 * node_modules/.bin, and hands anything else to the real npx. The blocks call `npx` some thirty times; npm's own
 * start-up (about 0.7 s each, more under load) is not what they test.
 */
function npxShim(): string {
  const dir = mkdtempSync(join(tmpdir(), 'eos-npx-'));
  const shim = join(dir, 'npx');
  writeFileSync(
    shim,
    [
      '#!/usr/bin/env bash',
      `root=${JSON.stringify(root)}`,
      `if [ "$1" = eos ]; then shift; exec node "$root/bin/eos.mjs" "$@"; fi`,
      `if [ -x "$root/node_modules/.bin/$1" ]; then bin=$1; shift; exec "$root/node_modules/.bin/$bin" "$@"; fi`,
      `PATH=\${PATH#${dir}:} exec npx "$@"`,
      '',
    ].join('\n'),
  );
  chmodSync(shim, 0o755);
  return dir;
}

describe('runnable docs', () => {
  let env: NodeJS.ProcessEnv;
  let laptopEnv: NodeJS.ProcessEnv;
  const userEnv = (from: NodeJS.ProcessEnv): NodeJS.ProcessEnv =>
    Object.fromEntries(
      Object.entries(from).filter(
        ([name]) => !name.startsWith('EOS_') && !name.startsWith('AWS_ENDPOINT_URL'),
      ),
    );

  beforeAll(async () => {
    // Committed output for the docs' `eos verify`, `eos read` and `eos status`: a short fault-free run of the
    // real pipeline (emulator, processor, the synthesized state machine) under the default pipeline id.
    const { table, bucket } = await freshResources('docs');
    const settings = parseSettings({ pipelineId: 'orders', ledgerTable: table, bucket });
    const { report } = await runLocal({
      settings,
      input: generateOrders({ seed: 3, records: 60, partitions: 2, poisonRate: 0.05 }),
      partitions: 2,
      faults: NO_FAULTS,
      seed: 3,
      checkpointIntervalMs: 1000,
      clock: 'virtual',
      batchSize: 20,
    });
    expect(report.verdict).toBe('exactly-once');
    env = {
      ...process.env,
      PATH: `${npxShim()}:${process.env.PATH}`,
      EOS_BUCKET: bucket,
      EOS_LEDGER_TABLE: table,
      AWS_REGION: process.env.AWS_REGION ?? 'us-east-1',
    };
    // The drills' own table and bucket (eos local creates them), on the parts the variables name.
    laptopEnv = {
      ...userEnv(env),
      AWS_ENDPOINT_URL_DYNAMODB: process.env.AWS_ENDPOINT_URL_DYNAMODB,
      AWS_ENDPOINT_URL_S3: process.env.AWS_ENDPOINT_URL_S3,
      AWS_REGION: process.env.AWS_REGION ?? 'us-east-1',
      EOS_LEDGER_TABLE: uniqueName('drills'),
      EOS_BUCKET: uniqueName('drills'),
    };
  }, BLOCK_TIMEOUT_MS);

  it('finds the runnable blocks of the tour (a marker typo would silently test nothing)', () => {
    const where = new Set(blocks.map((block) => block.file));
    expect(where).toContain('README.md');
    expect(where).toContain('docs/local.md');
    expect(blocks.some((block) => /eos local\b/.test(block.script))).toBe(true);
    expect(blocks.some((block) => /eos verify\b/.test(block.script))).toBe(true);
    expect(blocks.some((block) => /eos read\b/.test(block.script))).toBe(true);
  });

  it('runs a drill of every runbook procedure on a laptop, each ending with eos checkpoint and a check', () => {
    const drills = blocks.filter((block) => block.laptop);
    for (const procedure of [/eos redrive\b/, /eos epoch --start-new\b/, /eos deliver --generation\b/]) {
      const drill = drills.find((block) => procedure.test(block.script));
      expect(drill, `no drill runs ${procedure}`).toBeDefined();
      expect(drillEndsWithCheckpointAndCheck(drill!.script), `${drill!.file}:${drill!.line}`).toBe(true);
    }
    // A user's transforms live in a folder of their own, outside the clone.
    const transforms = drills.flatMap((block) =>
      [...block.script.matchAll(/(?:--transform[ =]|EOS_TRANSFORM=)(\S+)/g)].map((m) => m[1]!),
    );
    expect(transforms.length).toBeGreaterThanOrEqual(4);
    for (const path of transforms) expect(path, 'a drill transform inside the clone').toMatch(/^\.\.\//);
  });

  // A block that runs `eos local` starts a JVM (DynamoDB Local) with a start-up deadline: it runs first and alone.
  // The short commands then run concurrently (mostly process start-up).
  const startsLocalParts = (block: RunnableBlock) =>
    !block.laptop && /eos local(?! --help)/.test(block.script);
  // Then the drills, one after another in the docs' order; then the rest.
  const ordered = [
    ...blocks.filter(startsLocalParts),
    ...blocks.filter((block) => block.laptop),
    ...blocks.filter((block) => !startsLocalParts(block) && !block.laptop),
  ];
  for (const block of ordered) {
    const title = `${relative(root, join(root, block.file))}:${block.line}: ${block.script
      .split('\n')
      .find((l) => l.trim() && !l.startsWith('#'))
      ?.trim()}`;
    const alone = startsLocalParts(block) || block.laptop;
    const timeout = block.laptop ? DRILL_TIMEOUT_MS : BLOCK_TIMEOUT_MS;
    (alone ? it : it.concurrent)(
      `runs ${title}`,
      async ({ expect }) => {
        // `eos local` runs as on a user's machine: its own parts, its own table and bucket. It honours `EOS_*` and the
        // AWS endpoint variables, which here name the committed output above (a table whose fences a fresh emulated
        // topic would rightly take for offsets gone backwards).
        const blockEnv = block.laptop ? laptopEnv : startsLocalParts(block) ? userEnv(env) : env;
        const { code, output } = await run(block.script, blockEnv, timeout);
        expect(code, `${block.file}:${block.line} exited ${code}:\n${output}`).toBe(0);
      },
      timeout,
    );
  }
});
