/**
 * What the handlers write, captured per test: Powertools logs and EMF blobs go to stdout, warnings and errors to
 * stderr. Call at the top of a test file; each test starts with empty captures and the real streams come back after.
 */
import { afterEach, beforeEach, type MockInstance, vi } from 'vitest';

/** Returns a reader of every JSON line written to stdout or stderr since the current test began. */
export function captureJsonLines(): () => Record<string, unknown>[] {
  let stdout: MockInstance<typeof process.stdout.write>;
  let stderr: MockInstance<typeof process.stderr.write>;
  beforeEach(() => {
    stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
  });
  afterEach(() => {
    stdout.mockRestore();
    stderr.mockRestore();
  });
  return () =>
    [...stdout.mock.calls, ...stderr.mock.calls]
      .flatMap(([chunk]) => String(chunk).split('\n'))
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
}
