import { defineConfig } from 'vitest/config';

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
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
