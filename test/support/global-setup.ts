/**
 * Starts the real local parts once for the whole test run (DynamoDB Local and the S3 server) and hands their
 * endpoints to every test worker through the standard AWS_ENDPOINT_URL_* variables.
 *
 * The run's temporary files (the S3 server's objects, synthesized templates, bundles, packed tarballs) go in one
 * folder of its own, removed at teardown, so a run leaves nothing behind. It is on the machine's memory file
 * system when that has room: the S3 server spends most of its busy time in file system calls (open, stat, close,
 * mkdir), and the suite's temporary files are small and short-lived. Workers inherit TMPDIR, so `os.tmpdir()` is
 * that folder in every test.
 */
import { chmodSync, mkdtempSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { type LocalParts, startLocalParts } from '../../local/parts.ts';

/** A memory file system (tmpfs) most Linux machines mount. */
const MEMORY_FS = '/dev/shm';
/** Free space it must have to hold a run's files (a full run writes a few hundred MB at most). */
const MEMORY_FS_MIN_FREE_BYTES = 4 * 1024 ** 3;

let parts: LocalParts | undefined;
let runTemp: string | undefined;

function freeBytes(path: string): number {
  try {
    const stats = statfsSync(path);
    return stats.bavail * stats.bsize;
  } catch {
    return 0;
  }
}

export async function setup(_project: TestProject): Promise<void> {
  // Each project of the run calls this; the first sets up for all of them.
  if (process.env.TEST_RUN_TMPDIR) return;
  const base = freeBytes(MEMORY_FS) >= MEMORY_FS_MIN_FREE_BYTES ? MEMORY_FS : tmpdir();
  runTemp = mkdtempSync(join(base, 'eos-test-'));
  // Open to every user with the sticky bit, as /tmp is: a test runs a program as another user from a folder here.
  chmodSync(runTemp, 0o1777);
  process.env.TMPDIR = runTemp;
  process.env.TEST_RUN_TMPDIR = runTemp;
  // Endpoints given from outside (LocalStack, say: the README) are used as they are.
  if (process.env.AWS_ENDPOINT_URL_DYNAMODB && process.env.AWS_ENDPOINT_URL_S3) return;
  // A run of many minutes: the emulator's optimising compiler pays back its warm-up (local/parts.ts).
  parts = await startLocalParts({ compilation: 'tiered' });
  Object.assign(process.env, parts.env);
}

export async function teardown(): Promise<void> {
  await parts?.stop();
  if (runTemp) rmSync(runTemp, { recursive: true, force: true });
}
