/**
 * Every shell block the docs mark runnable (a fence with the info string `sh runnable`) runs, and exits 0.
 *
 * Blocks come from README.md, CONTRIBUTING.md and docs/*.md. Each runs as one `bash -euo pipefail` script from the
 * repository root, with the environment CONTRIBUTING.md documents: `EOS_BUCKET` and `EOS_LEDGER_TABLE` name a
 * bucket and table on the local parts (the vitest global setup's DynamoDB Local and S3 server) that hold the
 * committed output of a short real pipeline run under the pipeline id `orders`, and the AWS endpoint variables
 * point at those parts. So `eos verify`, `eos read` and `eos status` in the docs run against real committed
 * output, and `eos local` starts its own parts as it does for a user.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { NO_FAULTS } from '../../local/faults.ts';
import { generateOrders } from '../../local/generator.ts';
import { runLocal } from '../../local/runner.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { freshResources } from '../support/aws.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const RUNNABLE = /^```sh runnable[^\n]*\n([\s\S]*?)^```$/gm;
/** One block's budget: `eos local` starts DynamoDB Local (a JVM) and the S3 server itself. */
const BLOCK_TIMEOUT_MS = 150_000;

interface RunnableBlock {
  readonly file: string;
  readonly line: number;
  readonly script: string;
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
    blocks.push({ file, line, script: match[1]! });
  }
  return blocks;
}

function run(script: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-euo', 'pipefail', '-c', script], { cwd: root, env });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), BLOCK_TIMEOUT_MS - 5_000);
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

describe('runnable docs', () => {
  let env: NodeJS.ProcessEnv;
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
      EOS_BUCKET: bucket,
      EOS_LEDGER_TABLE: table,
      AWS_REGION: process.env.AWS_REGION ?? 'us-east-1',
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

  // A block that runs `eos local` starts a JVM (DynamoDB Local) with a start-up deadline: it runs first and alone.
  // The short commands then run concurrently (mostly process start-up).
  const startsLocalParts = (block: RunnableBlock) => /eos local(?! --help)/.test(block.script);
  const ordered = [...blocks.filter(startsLocalParts), ...blocks.filter((block) => !startsLocalParts(block))];
  for (const block of ordered) {
    const title = `${relative(root, join(root, block.file))}:${block.line}: ${block.script
      .split('\n')
      .find((l) => l.trim() && !l.startsWith('#'))
      ?.trim()}`;
    (startsLocalParts(block) ? it : it.concurrent)(
      `runs ${title}`,
      async ({ expect }) => {
        // `eos local` runs as on a user's machine: its own parts, its own table and bucket. It honours `EOS_*` and the
        // AWS endpoint variables, which here name the committed output above (a table whose fences a fresh emulated
        // topic would rightly take for offsets gone backwards).
        const { code, output } = await run(block.script, startsLocalParts(block) ? userEnv(env) : env);
        expect(code, `${block.file}:${block.line} exited ${code}:\n${output}`).toBe(0);
      },
      BLOCK_TIMEOUT_MS,
    );
  }
});
