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

/**
 * Files that need a module graph of their own: they mock modules (`vi.mock`), set environment variables the code
 * reads when it is imported, capture what the Lambda handlers' loggers and metrics write, or check what a cold
 * container has not loaded yet. Every other file shares its worker's modules with the files before it (`isolate:
 * false`): a fresh process per file spent a fifth of the suite importing the AWS SDK again, and files keep apart by
 * their own table, bucket and pipeline id, not by module state.
 */
const ISOLATED = [
  'test/observability/**',
  'test/coordinator/handlers.test.ts',
  'test/coordinator/parquet-slices.adversarial.test.ts',
  'test/iceberg/manifests.test.ts',
  'test/processor/cold-start.test.ts',
  'test/processor/missing-idempotency-key.test.ts',
  'test/processor/schema-lookup-metric.test.ts',
  'test/processor/state-guesses.adversarial.test.ts',
  'test/cli/local-endpoint.test.ts',
  'test/cli/matrix.test.ts',
  'test/docs/generated.test.ts',
  'test/examples/examples.test.ts',
  'test/infra/monitor-iam.test.ts',
  'test/local/localstack-event.test.ts',
  'test/redrive/registry.test.ts',
  'test/replay/timestamp-lookups.adversarial.test.ts',
  'test/transforms/e2e.test.ts',
];

export default defineConfig({
  test: {
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
    projects: [
      {
        extends: true,
        test: { name: 'shared', include: ['test/**/*.test.ts'], exclude: ISOLATED, isolate: false },
      },
      { extends: true, test: { name: 'isolated', include: ISOLATED, isolate: true } },
    ],
  },
});
