/**
 * `infra/app.ts` as `cdk synth` runs it: a child process, context through CDK_CONTEXT_JSON as the CLI passes it,
 * bundling skipped to keep it fast (`npm run synth` bundles). Each synthesizer writes into a temporary folder of its
 * own, removed after the test file.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

export interface AppSynthesis {
  status: number | null;
  stderr: string;
}

export interface AppSynthesizer {
  /** Where the cloud assembly (templates, manifest.json) is written. */
  outdir: string;
  synth(context: Record<string, unknown>): AppSynthesis;
}

const ROOT = new URL('../..', import.meta.url).pathname;

/** Call at the top of a test file: the folder is removed by that file's afterAll. */
export function appSynthesizer(prefix: string): AppSynthesizer {
  const outdir = mkdtempSync(join(tmpdir(), prefix));
  afterAll(() => rmSync(outdir, { recursive: true, force: true }));
  const synth = (context: Record<string, unknown>): AppSynthesis => {
    const result = spawnSync('npx', ['tsx', 'infra/app.ts'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: {
        ...process.env,
        CDK_OUTDIR: outdir,
        CDK_CONTEXT_JSON: JSON.stringify({ 'aws:cdk:bundling-stacks': [], ...context }),
        AWS_EC2_METADATA_DISABLED: 'true',
        // The built-in CloudFormation schema validation (on in `npm run synth`) costs seconds; cdk-nag still runs.
        CDK_VALIDATION: 'false',
      },
    });
    return { status: result.status, stderr: result.stderr };
  };
  return { outdir, synth };
}
