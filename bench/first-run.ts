/**
 * First run: `npm start` in a fresh clone of this repository — DynamoDB Local fetched into the clone's
 * empty `.cache/`, every fault kind on — timed from the command to its verdict. The clone shares this checkout's
 * `node_modules` (a symlink): `npm ci` is the install step the README lists before it, not part of the run.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface FirstRunResult {
  /** From `npm start` to its exit, seconds, DynamoDB Local download included. */
  readonly seconds: number;
  readonly exitCode: number | null;
  readonly verdict: string;
  readonly checkpoints: string;
  readonly faults: string;
}

function lineOf(output: string, label: string): string {
  const line = output.split('\n').find((l) => l.trimStart().startsWith(label));
  return line ? line.trim().slice(label.length).trim() : '(not printed)';
}

export async function measureFirstRun(root: string): Promise<FirstRunResult> {
  const dir = mkdtempSync(join(tmpdir(), 'eos-first-run-'));
  const clone = join(dir, 'clone');
  try {
    execFileSync('git', ['clone', '--quiet', '--local', root, clone]);
    symlinkSync(join(root, 'node_modules'), join(clone, 'node_modules'), 'dir');
    const env = Object.fromEntries(
      Object.entries(process.env).filter(([name]) => !name.startsWith('EOS_') && !name.startsWith('AWS_')),
    );
    const started = performance.now();
    const { code, output } = await new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = spawn('npm', ['start', '--silent'], {
        cwd: clone,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString('utf8');
      });
      child.stderr.resume();
      child.on('close', (exit) => resolve({ code: exit, output }));
    });
    const seconds = (performance.now() - started) / 1000;
    return {
      seconds: Number(seconds.toFixed(1)),
      exitCode: code,
      verdict: lineOf(output, 'verdict'),
      checkpoints: lineOf(output, 'checkpoints'),
      faults: lineOf(output, 'faults injected'),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
