/**
 * A reader that stops reading (`eos … | head -2`) ends the command quietly with status 0, not with an EPIPE stack
 * trace. A real process with its standard output piped, closed after the first line.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve('.');

describe('eos with a reader that stops reading', { timeout: 60_000 }, () => {
  it('exits 0 without a stack trace when its output pipe closes early', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'eos-epipe-'));
    const schema = join(dir, 'n.avsc');
    writeFileSync(
      schema,
      JSON.stringify({ type: 'record', name: 'N', fields: [{ name: 'n', type: 'long' }] }),
    );
    const input = join(dir, 'in.jsonl');
    // Far more output than a pipe buffers, so the command is still writing when the reader goes.
    writeFileSync(
      input,
      Array.from({ length: 50_000 }, (_, n) =>
        JSON.stringify({ partition: 0, key: null, value: { n } }),
      ).join('\n'),
    );
    const child = spawn(
      join(ROOT, 'node_modules', '.bin', 'tsx'),
      ['cli/eos.ts', 'encode', '--schema', schema, '--input', input],
      {
        cwd: ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const firstLine = await new Promise<string>((done) => {
      child.stdout.once('data', (chunk: Buffer) => {
        child.stdout.destroy();
        done(chunk.toString().split('\n')[0]!);
      });
    });
    const code = await new Promise<number | null>((done) => child.on('close', done));
    expect(JSON.parse(firstLine)).toMatchObject({ partition: 0 });
    expect(stderr).not.toMatch(/EPIPE|Error/);
    expect(code).toBe(0);
  });
});
