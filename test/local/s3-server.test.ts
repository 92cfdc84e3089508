/**
 * The S3 server as a user starts it by hand (docs/local.md): on the port named, accepting only the key pair it was
 * given; a bad argument is one usage line, exit 2.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';

const SERVER = resolve('local/s3-server.cjs');

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as { port: number };
  await new Promise((done) => server.close(done));
  return port;
}

describe('local/s3-server.cjs started by hand', { timeout: 30_000 }, () => {
  it('listens on the port named and accepts only its own key pair', async () => {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'eos-s3-hand-'));
    const child = spawn(
      process.execPath,
      ['--openssl-legacy-provider', SERVER, dir, 'mine', 'my-secret', String(port)],
      {
        stdio: ['pipe', 'pipe', 'inherit'],
      },
    );
    try {
      const first = await new Promise<string>((done) =>
        child.stdout.once('data', (b: Buffer) => done(b.toString())),
      );
      expect(JSON.parse(first)).toEqual({ port });
      const client = (accessKeyId: string, secretAccessKey: string) =>
        new S3Client({
          endpoint: `http://127.0.0.1:${port}`,
          region: 'us-east-1',
          forcePathStyle: true,
          credentials: { accessKeyId, secretAccessKey },
        });
      await client('mine', 'my-secret').send(new CreateBucketCommand({ Bucket: 'hand-made' }));
      await expect(
        client('other', 'keys').send(new CreateBucketCommand({ Bucket: 'refused' })),
      ).rejects.toThrow();
    } finally {
      child.stdin.end();
    }
  });

  it('refuses a port that is not one, in one line', () => {
    const result = spawnSync(
      process.execPath,
      ['--openssl-legacy-provider', SERVER, '/tmp', 'a', 'b', 'ninety'],
      {
        encoding: 'utf8',
      },
    );
    expect(result.status).toBe(2);
    expect(result.stderr).toBe(
      'usage: s3-server.cjs <directory> <accessKeyId> <secretAccessKey> [port 0-65535]\n',
    );
  });
});
