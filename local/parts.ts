/**
 * The local AWS parts, started and stopped by one module that the tests, the local runner and the benchmark
 * share: AWS's DynamoDB Local (a Java process) and s3rver (an S3-compatible server, in a child process).
 *
 * `startLocalParts()` returns the endpoints as the standard `AWS_ENDPOINT_URL_*` variables; callers put them
 * into `process.env` (or a child's environment) and every client picks them up, as it would LocalStack's.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { verifyInstall } from '../scripts/setup-local-parts.mjs';
import { MissingResourceError } from '../shared/errors.ts';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const DYNAMODB_LOCAL_DIR = join(root, '.cache', 'dynamodb-local');

/** Credentials the local parts accept. Not secrets: they only open servers on the loopback interface. */
export const LOCAL_CREDENTIALS = { accessKeyId: 'local', secretAccessKey: 'local-secret' } as const;

export interface LocalParts {
  /** Environment variables that point AWS clients at the local parts. */
  readonly env: Record<string, string>;
  readonly dynamodbEndpoint: string;
  readonly s3Endpoint: string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

function assertJava(): void {
  const probe = spawnSync('java', ['-version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    throw new MissingResourceError(
      'java',
      'DynamoDB Local needs a Java runtime (17+) on PATH; on Debian: apt-get install -y default-jre-headless',
    );
  }
}

function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((done) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
    child.once('exit', () => {
      clearTimeout(timer);
      done();
    });
    child.kill('SIGTERM');
  });
}

async function waitForDynamoDb(
  endpoint: string,
  child: ChildProcess,
  output: () => string,
  timeoutMs = 90_000,
): Promise<void> {
  const client = new DynamoDBClient({
    endpoint,
    region: 'us-east-1',
    credentials: LOCAL_CREDENTIALS,
    maxAttempts: 1,
  });
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      if (child.exitCode !== null) {
        // Java's own words (an unsupported class version, a port in use) say what to do better than a code.
        const said = output().trim().split('\n').slice(-3).join(' | ');
        throw new MissingResourceError(
          'DynamoDB Local',
          `exited with code ${child.exitCode}${said ? `: ${said}` : ''} (Java 17+ on PATH? run \`npm run setup\`)`,
        );
      }
      try {
        await client.send(new ListTablesCommand({}));
        return;
      } catch (error) {
        if (Date.now() > deadline)
          throw new MissingResourceError('DynamoDB Local', `did not answer at ${endpoint}`, { cause: error });
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  } finally {
    client.destroy();
  }
}

/**
 * Starts DynamoDB Local from `dir` (the setup's install by default) once its files match the SHA-256 pinned in
 * scripts/setup-local-parts.mjs: a jar or library changed in the cache, manifest re-sealed or not, is refused.
 *
 * It listens on every interface: the jar has no option for the address (only `-port`). What can be narrowed is:
 * a random free port, in memory (nothing on disk), and CORS off (`-cors ""`; the default `*` lets any web page the
 * developer opens call it). It checks no credentials, so on a shared network its port must be firewalled.
 */
export async function startDynamoDbLocal(
  dir: string = DYNAMODB_LOCAL_DIR,
  compilation: Compilation = 'quick',
): Promise<{ endpoint: string; process: ChildProcess }> {
  const jar = join(dir, 'DynamoDBLocal.jar');
  if (!existsSync(jar)) {
    throw new MissingResourceError('DynamoDB Local', `not installed at ${jar}; run \`npm run setup\` first`);
  }
  const untrusted = verifyInstall(dir);
  if (untrusted !== undefined) {
    throw new MissingResourceError('DynamoDB Local', `refusing ${dir}: ${untrusted}; run \`npm run setup\``);
  }
  assertJava();
  const port = await freePort();
  const child = spawn(
    'java',
    [
      '-Xmx1g',
      '-XX:+UseSerialGC',
      ...(compilation === 'quick' ? ['-XX:TieredStopAtLevel=1'] : []),
      `-Djava.library.path=${join(dir, 'DynamoDBLocal_lib')}`,
      '-jar',
      jar,
      '-inMemory',
      '-disableTelemetry',
      '-port',
      String(port),
      // An empty allow-list: no origin may call it from a browser.
      '-cors',
      '',
    ],
    { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  // A process that ends without stopping it (an uncaught error, process.exit) would leave the JVM running with its
  // gigabyte and its port: nothing else ends it (the S3 server ends by itself when its stdin closes).
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  child.once('exit', () => process.removeListener('exit', killOnExit));
  const endpoint = `http://127.0.0.1:${port}`;
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString('utf8')).slice(-4096);
  });
  try {
    await waitForDynamoDb(endpoint, child, () => stderr);
  } catch (error) {
    await stopProcess(child);
    throw error;
  }
  return { endpoint, process: child };
}

export async function startS3Server(directory: string): Promise<{ endpoint: string; process: ChildProcess }> {
  const child = spawn(
    process.execPath,
    [
      '--openssl-legacy-provider',
      join(root, 'local', 's3-server.cjs'),
      directory,
      LOCAL_CREDENTIALS.accessKeyId,
      LOCAL_CREDENTIALS.secretAccessKey,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, NODE_OPTIONS: '' } },
  );
  const port = await new Promise<number>((resolvePort, reject) => {
    let buffer = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString('utf8');
      const line = buffer.split('\n')[0];
      if (buffer.includes('\n') && line) resolvePort((JSON.parse(line) as { port: number }).port);
    });
    child.once('exit', (code) => reject(new MissingResourceError('S3 server', `exited with code ${code}`)));
  });
  return { endpoint: `http://127.0.0.1:${port}`, process: child };
}

/**
 * How DynamoDB Local's JVM compiles. `quick` (C1 only) suits a run of a minute or two (`eos local`): the optimising
 * compiler's warm-up cost about 8 s of CPU in the first 5,000 conditional writes (12.1 s of JVM CPU against 6.2 s)
 * and never paid back. `tiered` (the JVM's default, C1 then C2) suits runs of many minutes (the test suite; the
 * benchmark keeps `quick`, so its figures stay comparable with earlier runs): once warm it writes faster (500 claim INSERTs in 151 ms against 187 ms), and over the whole suite the
 * JVM used 174 s of CPU against 212 s, the suite's wall time 560 s against 600 s.
 */
export type Compilation = 'quick' | 'tiered';

export interface StartOptions {
  /** Where the S3 server keeps objects; a fresh temporary folder (removed on stop) if omitted. */
  readonly s3Directory?: string;
  /**
   * How DynamoDB Local's JVM compiles ({@link Compilation}).
   * @default 'quick'
   */
  readonly compilation?: Compilation;
}

/** Starts DynamoDB Local and the S3 server side by side. */
export async function startLocalParts(options: StartOptions = {}): Promise<LocalParts> {
  const s3Directory = options.s3Directory ?? mkdtempSync(join(tmpdir(), 'eos-s3-'));
  const started = await Promise.allSettled([
    startDynamoDbLocal(DYNAMODB_LOCAL_DIR, options.compilation),
    startS3Server(s3Directory),
  ]);
  const [dynamodb, s3] = started;
  if (dynamodb.status === 'rejected' || s3.status === 'rejected') {
    // A failed start stops whatever did start: no DynamoDB Local left running behind a failed S3 server.
    await Promise.all(
      started.map((part) => (part.status === 'fulfilled' ? stopProcess(part.value.process) : undefined)),
    );
    if (!options.s3Directory) rmSync(s3Directory, { recursive: true, force: true });
    throw dynamodb.status === 'rejected' ? dynamodb.reason : (s3 as PromiseRejectedResult).reason;
  }
  const env = {
    AWS_ENDPOINT_URL_DYNAMODB: dynamodb.value.endpoint,
    AWS_ENDPOINT_URL_S3: s3.value.endpoint,
    AWS_ACCESS_KEY_ID: LOCAL_CREDENTIALS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: LOCAL_CREDENTIALS.secretAccessKey,
    AWS_REGION: 'us-east-1',
  };
  return {
    env,
    dynamodbEndpoint: dynamodb.value.endpoint,
    s3Endpoint: s3.value.endpoint,
    async stop() {
      await Promise.all([stopProcess(dynamodb.value.process), stopProcess(s3.value.process)]);
      if (!options.s3Directory) rmSync(s3Directory, { recursive: true, force: true });
    },
  };
}
