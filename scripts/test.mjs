#!/usr/bin/env node
// `npm test` after the setup: the checks (tsc, Biome, cdk synth, the model check) and every vitest test, at once.
//
// The suite keeps about one and a half of two cores busy: it waits on DynamoDB Local and the S3 server as often as
// it computes. The checks (a minute of their own, most of it the model check) fill that slack instead of running
// first. The checks' output is held and printed whole after vitest's, so the two never interleave; the exit code
// is the first failure's (the checks', then vitest's), 0 when both pass.
import { spawn } from 'node:child_process';

const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const vitestArgs = ['vitest', 'run', ...process.argv.slice(2)];

function run(command, args, { capture }) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: capture ? ['ignore', 'pipe', 'pipe'] : 'inherit' });
    const chunks = [];
    if (capture) {
      child.stdout.on('data', (chunk) => chunks.push(chunk));
      child.stderr.on('data', (chunk) => chunks.push(chunk));
    }
    child.on('error', (error) => resolve({ code: 1, output: Buffer.from(`${command}: ${error.message}\n`) }));
    child.on('close', (code, signal) =>
      resolve({ code: code ?? (signal ? 1 : 0), output: Buffer.concat(chunks) }),
    );
  });
}

const [checks, tests] = await Promise.all([
  run(npm, ['run', '-s', 'checks'], { capture: true }),
  run('npx', vitestArgs, { capture: false }),
]);
const checksCode = checks.code;
const testsCode = tests.code;
process.stdout.write(
  `\n[checks] tsc, Biome, cdk synth and the model check ${checksCode === 0 ? 'passed' : 'FAILED'}:\n`,
);
process.stdout.write(checks.output);
if (checksCode !== 0) console.error(`npm test: the checks failed (exit ${checksCode})`);
if (testsCode !== 0) console.error(`npm test: vitest failed (exit ${testsCode})`);
process.exit(checksCode || testsCode);
