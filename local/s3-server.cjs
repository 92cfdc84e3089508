// Runs s3rver, an S3-compatible server, in its own process. It needs the OpenSSL legacy provider (else any
// paged ListObjectsV2 answers 500), which can only be enabled when Node starts, hence a child process.
// Usage: node --openssl-legacy-provider local/s3-server.cjs <directory> <accessKeyId> <secretAccessKey>
// Prints {"port": N} on its first stdout line once listening; exits when stdin closes (its parent is gone).
'use strict';
const S3rver = require('s3rver');
const { DUMMY_ACCOUNT } = require('s3rver/lib/models/account');

const [directory, accessKeyId, secretAccessKey] = process.argv.slice(2);
DUMMY_ACCOUNT.createKeyPair(accessKeyId, secretAccessKey);
const server = new S3rver({ port: 0, address: '127.0.0.1', directory, silent: true });
server.run().then(
  ({ port }) => process.stdout.write(`${JSON.stringify({ port })}\n`),
  (error) => {
    process.stderr.write(`s3rver failed to start: ${error.stack}\n`);
    process.exit(1);
  },
);
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
