/**
 * Endpoints of one's own: `--dynamodb-endpoint` and `--s3-endpoint` on the commands that talk to AWS, and every AWS
 * failure naming the service and endpoint it came from. Real processes against the test's local parts; the case a
 * user met: one endpoint for everything that is DynamoDB's only, so S3 calls reach DynamoDB Local.
 */
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, uniqueName } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

const ROOT = resolve('.');

function eos(args: readonly string[], env: NodeJS.ProcessEnv) {
  const result = spawnSync(join(ROOT, 'node_modules', '.bin', 'tsx'), ['cli/eos.ts', ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    env,
    timeout: 60_000,
  });
  return { code: result.status, out: result.stdout, err: result.stderr };
}

describe('endpoints of one’s own', { timeout: 120_000 }, () => {
  it('--s3-endpoint beside a DynamoDB-only endpoint; without it, the error names S3 and where it went', async () => {
    const res = await freshResources('service-endpoints');
    const settings = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: uniqueName('se'),
    });
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(orderRecords(0, 0, 3)));
    expect((await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint()).status).toBe(
      'committed',
    );
    const dynamodb = process.env.AWS_ENDPOINT_URL_DYNAMODB!;
    const s3 = process.env.AWS_ENDPOINT_URL_S3!;
    const {
      AWS_ENDPOINT_URL_DYNAMODB: _d,
      AWS_ENDPOINT_URL_S3: _s,
      AWS_ENDPOINT_URL: _a,
      ...rest
    } = process.env;
    const env = { ...rest, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' };
    const verify = ['verify', '--bucket', res.bucket, '--pipeline', settings.pipelineId];

    const wrong = eos([...verify, '--endpoint', dynamodb], env);
    expect(wrong.code).toBe(3);
    expect(wrong.err.trim().split('\n')).toHaveLength(1);
    expect(wrong.err).toMatch(new RegExp(`^error: S3 at ${dynamodb.replaceAll('.', '\\.')}: `));

    const right = eos([...verify, '--endpoint', dynamodb, '--s3-endpoint', s3], env);
    expect(right.err).toBe('');
    expect(right.code).toBe(0);
    expect(right.out).toMatch(/^OK: 1 manifests/);

    // The variable alone for one service, the flag for the other.
    const mixed = eos([...verify, '--s3-endpoint', s3], { ...env, AWS_ENDPOINT_URL: dynamodb });
    expect(mixed.code).toBe(0);
  });

  it('names DynamoDB and its endpoint when it cannot be reached', () => {
    const { AWS_ENDPOINT_URL_DYNAMODB: _d, AWS_ENDPOINT_URL: _a, ...env } = process.env;
    const status = eos(['status', '--table', 't', '--dynamodb-endpoint', 'http://127.0.0.1:1'], env);
    expect(status.code).toBe(3);
    expect(status.err).toMatch(/^error: DynamoDB at http:\/\/127\.0\.0\.1:1: cannot reach AWS: /);
  });
});
