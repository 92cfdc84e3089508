/**
 * DynamoDB Local as the local parts start it: only the code pinned in scripts/setup-local-parts.mjs runs (the
 * cache's own manifest can be re-sealed by whoever can write the cache, the script cannot), and no web page of
 * another origin may call it (CORS off). It listens on every interface: the jar has no option for the address.
 */
import { spawnSync } from 'node:child_process';
import { appendFileSync, cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DYNAMODB_LOCAL_DIR, startDynamoDbLocal } from '../../local/parts.ts';
import { installDynamoDbLocal, sealInstall, verifyInstall } from '../../scripts/setup-local-parts.mjs';
import { MissingResourceError } from '../../shared/errors.ts';

const scratch = mkdtempSync(join(tmpdir(), 'eos-ddb-pins-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A copy of the real install, as an attacker with write access to the cache would start from. */
function copyOfInstall(name: string): string {
  const dir = join(scratch, name);
  cpSync(DYNAMODB_LOCAL_DIR, dir, { recursive: true });
  return dir;
}

async function refusal(dir: string): Promise<string> {
  try {
    const started = await startDynamoDbLocal(dir);
    started.process.kill('SIGKILL');
    return 'started';
  } catch (error) {
    expect(error).toBeInstanceOf(MissingResourceError);
    return (error as Error).message;
  }
}

describe('DynamoDB Local runs only the pinned code', () => {
  it('the installed copy matches the pins', () => {
    expect(verifyInstall(DYNAMODB_LOCAL_DIR)).toBeUndefined();
  });

  it('refuses to start a native library changed in the cache, even with the manifest re-sealed; in one line', async () => {
    const dir = copyOfInstall('native');
    appendFileSync(join(dir, 'DynamoDBLocal_lib', 'libsqlite4java-linux-amd64.so'), 'planted');
    sealInstall(dir);
    const said = await refusal(dir);
    expect(said).toMatch(
      /^DynamoDB Local: refusing .*: DynamoDBLocal_lib\/libsqlite4java-linux-amd64\.so does not match the SHA-256 pinned in scripts\/setup-local-parts\.mjs; run `npm run setup`$/,
    );
  });

  it('refuses to start a changed DynamoDBLocal.jar, and a jar planted on its class path, re-sealed', async () => {
    const jar = copyOfInstall('jar');
    appendFileSync(join(jar, 'DynamoDBLocal.jar'), 'planted');
    sealInstall(jar);
    expect(await refusal(jar)).toMatch(/DynamoDBLocal\.jar does not match the SHA-256 pinned/);

    const planted = copyOfInstall('planted');
    writeFileSync(join(planted, 'DynamoDBLocal_lib', 'zz-agent.jar'), 'planted');
    sealInstall(planted);
    expect(await refusal(planted)).toMatch(/jars and native libraries do not match the digest pinned/);
  });

  it('the setup refuses a cached copy that differs from the pins, re-sealed, and fetches it again', () => {
    const dir = copyOfInstall('setup');
    appendFileSync(join(dir, 'DynamoDBLocal_lib', 'libsqlite4java-linux-amd64.so'), 'planted');
    sealInstall(dir);
    let fetched = 0;
    const fetch = (staging: string) => {
      fetched++;
      cpSync(DYNAMODB_LOCAL_DIR, staging, { recursive: true });
      rmSync(join(staging, '.sha256.json'));
    };
    expect(installDynamoDbLocal({ target: dir, fetch })).toBe('installed');
    expect(fetched).toBe(1);
    expect(verifyInstall(dir)).toBeUndefined();
  });
});

describe('DynamoDB Local with CORS off', () => {
  // A browser lets a page read an answer, or send the JSON call at all, only if the server names its origin (or
  // `*`) in Access-Control-Allow-Origin: with none in either answer, no page of another origin can use it.
  it('grants no origin: neither a browser preflight nor a call carries Access-Control-Allow-Origin', async () => {
    const { endpoint, process: child } = await startDynamoDbLocal();
    try {
      const origin = 'http://attacker.example';
      const preflight = await fetch(endpoint, {
        method: 'OPTIONS',
        headers: {
          Origin: origin,
          'Access-Control-Request-Method': 'POST',
          'Access-Control-Request-Headers': 'authorization,content-type,x-amz-date,x-amz-target',
        },
      });
      expect(preflight.headers.get('access-control-allow-origin')).toBeNull();
      const call = await fetch(endpoint, {
        method: 'POST',
        headers: {
          Origin: origin,
          'Content-Type': 'application/x-amz-json-1.0',
          'X-Amz-Target': 'DynamoDB_20120810.ListTables',
          Authorization:
            'AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0',
        },
        body: '{}',
      });
      expect(call.headers.get('access-control-allow-origin')).toBeNull();
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('ends with the process that started it, even one that dies of an uncaught error', async () => {
    const script = join(scratch, 'dies.mts');
    writeFileSync(
      script,
      `import { startDynamoDbLocal } from ${JSON.stringify(resolve('local/parts.ts'))};\n` +
        'const { process: child } = await startDynamoDbLocal();\n' +
        'console.log(child.pid);\n' +
        "throw new Error('dies without stopping it');\n",
    );
    const run = spawnSync(process.execPath, ['--import', 'tsx', script], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(run.stderr).toContain('dies without stopping it');
    const pid = Number(run.stdout.trim());
    expect(pid).toBeGreaterThan(0);
    const alive = () => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    const deadline = Date.now() + 5_000;
    while (alive() && Date.now() < deadline) await new Promise((done) => setTimeout(done, 100));
    const survived = alive();
    if (survived) process.kill(pid, 'SIGKILL');
    expect(survived).toBe(false);
  });
});
