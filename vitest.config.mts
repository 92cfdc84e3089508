import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The files that take minutes, longest first, by file name (wherever their subject folder puts them). With two
 * workers the suite lasts at least as long as its slowest file, and longer when that file starts last: on a fresh
 * clone (CI: no timing cache) vitest runs the largest files first, and the chaos test is a small file. These start
 * first; the rest fill the other worker meanwhile.
 */
const SLOW_FIRST = [
  'runnable.test.ts',
  'chaos.test.ts',
  'model-check.test.ts',
  'package.test.ts',
  'state-machine-limits.test.ts',
  'checkpoint-limits.test.ts',
  'runner-epochs.test.ts',
];

class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (file: TestSpecification) => {
      const index = SLOW_FIRST.findIndex((name) => file.moduleId.endsWith(`/${name}`));
      return index === -1 ? SLOW_FIRST.length : index;
    };
    // Array.prototype.sort is stable: the others keep vitest's own order.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    setupFiles: ['test/support/polyfills.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Test files share one DynamoDB Local and one S3 server (started by the global setup); each file
    // isolates itself with its own pipeline id, table or bucket. Two cores: keep the pool small.
    pool: 'forks',
    maxWorkers: 2,
    sequence: { sequencer: SlowFirstSequencer },
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
