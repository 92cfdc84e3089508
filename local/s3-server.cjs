// Runs s3rver, an S3-compatible server, in its own process. It needs the OpenSSL legacy provider (else any
// paged ListObjectsV2 answers 500), which can only be enabled when Node starts, hence a child process.
// Usage: node --openssl-legacy-provider local/s3-server.cjs <directory> <accessKeyId> <secretAccessKey>
// Prints {"port": N} on its first stdout line once listening; exits when stdin closes (its parent is gone).
'use strict';
const crypto = require('node:crypto');
const path = require('node:path');
const { Transform } = require('node:stream');
const S3rver = require('s3rver');
const { DUMMY_ACCOUNT } = require('s3rver/lib/models/account');
const FilesystemStore = require('s3rver/lib/stores/filesystem');
// s3rver's own fs-extra (not a dependency of ours).
const fs = require(require.resolve('fs-extra', { paths: [require.resolve('s3rver')] }));

// s3rver's filesystem store races with itself: a delete removes a key's directory once it is empty, while a put
// to another key of that directory has made it and not yet opened its file. The put's write stream then fails with
// ENOENT on a stream nobody listens to, and the whole server process dies (seen when a coordinator cleanup deletes
// a checkpoint's work objects while a zombie step writes one). Real S3 has no directories. So: the put listens for
// its stream's errors and retries a buffered body once the directory is made again; the delete's empty-directory
// sweep ignores a directory that is gone or no longer empty.
async function putOnce(store, object) {
  const objectPath = store.getResourcePath(object.bucket, object.key, 'object');
  await fs.mkdirp(path.dirname(objectPath));
  const [size, md5] = await new Promise((resolve, reject) => {
    const writeStream = fs.createWriteStream(objectPath);
    writeStream.on('error', reject);
    const md5Context = crypto.createHash('md5');
    if (Buffer.isBuffer(object.content)) {
      md5Context.update(object.content);
      writeStream.end(object.content, () => resolve([object.content.length, md5Context.digest('hex')]));
      return;
    }
    let totalLength = 0;
    object.content
      .on('error', reject)
      .pipe(
        new Transform({
          transform(chunk, encoding, callback) {
            md5Context.update(chunk, encoding);
            totalLength += chunk.length;
            callback(null, chunk);
          },
        }),
      )
      .on('error', reject)
      .pipe(writeStream)
      .on('finish', () => resolve([totalLength, md5Context.digest('hex')]));
  });
  await store.putMetadata(object.bucket, object.key, object.metadata, md5);
  return { size, md5 };
}

FilesystemStore.prototype.putObject = async function putObject(object) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await putOnce(this, object);
    } catch (error) {
      // A streamed body cannot be replayed: the request fails (500) and the client retries it.
      if (error.code !== 'ENOENT' || attempt >= 5 || !Buffer.isBuffer(object.content)) throw error;
    }
  }
};

const deleteObject = FilesystemStore.prototype.deleteObject;
FilesystemStore.prototype.deleteObject = async function deleteObjectTolerantly(bucket, key) {
  try {
    await deleteObject.call(this, bucket, key);
  } catch (error) {
    if (error.code !== 'ENOENT' && error.code !== 'ENOTEMPTY') throw error;
  }
};

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
