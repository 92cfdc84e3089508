// Runs s3rver, an S3-compatible server, in its own process. It needs the OpenSSL legacy provider (else any
// paged ListObjectsV2 answers 500), which can only be enabled when Node starts, hence a child process.
// Usage: node --openssl-legacy-provider local/s3-server.cjs <directory> <accessKeyId> <secretAccessKey> [port]
// (port: default a free one; a user starting it by hand names one, docs/local.md)
// Prints {"port": N} on its first stdout line once listening; exits when stdin closes (its parent is gone).
//
// s3rver 3.7.1 is patched here rather than forked: two of its filesystem store's methods (put, copy, delete) and
// three of its object controllers are replaced in this process only, so the package stays the published one and
// an upgrade shows at once whether the patch still fits. What the patch adds:
//
// - Conditional writes as S3 answers them. `If-None-Match: *` on PutObject, CopyObject (the destination) and
//   CompleteMultipartUpload answers 412 PreconditionFailed when the key exists; `If-Match: <etag>` answers 412
//   when the key's ETag differs and 404 NoSuchKey when there is no object. s3rver ignores both headers, so every
//   write-once guard of the pipeline passed locally whatever it did.
// - `x-amz-copy-source-if-match: <etag>` on CopyObject, a condition on the SOURCE: 412 PreconditionFailed when the
//   source's ETag differs. It is checked under the source key's lock, and the source file is opened there too, so
//   the bytes copied are the bytes of the ETag checked even when the source is rewritten or deleted meanwhile (a
//   put renames a new file into place; the open file keeps the old one). The other `x-amz-copy-source-if-*`
//   headers stay as s3rver has them (ignored).
// - Atomic writes per key. The body is received into a temporary file beside the object; then, under a lock of
//   its key, the condition is checked, the metadata written and the file renamed into place. So of concurrent
//   conditional writes of one key the first to finish wins and the others get 412, as on S3 (which may instead
//   answer 409 ConditionalRequestConflict to a write racing another: a retry signal, not emulated), and an upload
//   cut off mid-body leaves no object behind (s3rver wrote straight into the object's file, so a half body was
//   an object, and a write-once retry found it "already there" with other bytes). Deletes take the same lock.
// - No crash when a put races a delete that sweeps the folder it is writing into: the folder is made again and the
//   file opened again before any byte of the body is read (s3rver's write stream failed with ENOENT on a stream
//   nobody listened to, and the whole server process died). Real S3 has no folders.
'use strict';
const { AsyncLocalStorage } = require('node:async_hooks');
const crypto = require('node:crypto');
const path = require('node:path');
const { Readable, Transform } = require('node:stream');
const { pipeline } = require('node:stream/promises');
const S3rver = require('s3rver');
const objectController = require('s3rver/lib/controllers/object');
const { DUMMY_ACCOUNT } = require('s3rver/lib/models/account');
const S3Error = require('s3rver/lib/models/error');
const FilesystemStore = require('s3rver/lib/stores/filesystem');
// s3rver's own fs-extra (not a dependency of ours).
const fs = require(require.resolve('fs-extra', { paths: [require.resolve('s3rver')] }));

/** One queue per key: a task starts when the previous one of the same key has settled. */
const keyTails = new Map();
async function underKeyLock(bucket, key, task) {
  const id = `${bucket}/${key}`;
  const previous = keyTails.get(id) ?? Promise.resolve();
  let release;
  const mine = new Promise((resolve) => {
    release = resolve;
  });
  const tail = previous.then(() => mine);
  keyTails.set(id, tail);
  await previous;
  try {
    return await task();
  } finally {
    release();
    if (keyTails.get(id) === tail) keyTails.delete(id);
  }
}

/** The request's write conditions, from the controller that received it down to the store that writes. */
const writeConditions = new AsyncLocalStorage();

const unquoted = (etag) => String(etag).replaceAll('"', '');

/** Throws S3's answer when the request's conditions do not hold for `bucket/key` now. Call under its lock. */
async function checkWriteConditions(store, bucket, key) {
  const { ifNoneMatch, ifMatch } = writeConditions.getStore() ?? {};
  if (ifNoneMatch === undefined && ifMatch === undefined) return;
  if (ifNoneMatch !== undefined && ifNoneMatch !== '*') {
    // S3 takes only `*` on a write: an ETag here would be a read's condition.
    throw new S3Error(
      'NotImplemented',
      'A header you provided implies functionality that is not implemented',
      {
        Header: 'If-None-Match',
      },
    );
  }
  const current = await store.getMetadata(bucket, key).catch((error) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });
  if (ifNoneMatch === '*' && current) {
    throw new S3Error('PreconditionFailed', 'At least one of the pre-conditions you specified did not hold', {
      Condition: 'If-None-Match',
    });
  }
  if (ifMatch !== undefined) {
    if (!current) throw new S3Error('NoSuchKey', 'The specified key does not exist.', { Key: key });
    if (unquoted(ifMatch) !== unquoted(current.etag)) {
      throw new S3Error(
        'PreconditionFailed',
        'At least one of the pre-conditions you specified did not hold',
        {
          Condition: 'If-Match',
        },
      );
    }
  }
}

/** Runs a controller with its request's `If-None-Match` / `If-Match` visible to the store's writes. */
function withWriteConditions(controller) {
  return (ctx) => {
    const conditions = {
      ifNoneMatch: ctx.headers['if-none-match'],
      ifMatch: ctx.headers['if-match'],
      copySourceIfMatch: ctx.headers['x-amz-copy-source-if-match'],
    };
    return writeConditions.run(conditions, () => controller(ctx));
  };
}
for (const name of ['putObject', 'putObjectCopy', 'completeMultipartUpload']) {
  objectController[name] = withWriteConditions(objectController[name]);
}

/** Opens a new file at `filePath`, making its folder (again, if a delete swept it meanwhile) as needed. */
async function openCreatingFolder(filePath) {
  for (let attempt = 1; ; attempt++) {
    await fs.mkdirp(path.dirname(filePath));
    try {
      return await fs.promises.open(filePath, 'wx');
    } catch (error) {
      if (error.code !== 'ENOENT' || attempt >= 5) throw error;
    }
  }
}

const temporaryBeside = (objectPath) => `${objectPath}.${crypto.randomBytes(6).toString('hex')}.upload`;

/** Receives `content` (a Buffer or a stream) into `filePath`; returns its size and MD5. */
async function receive(content, filePath) {
  const handle = await openCreatingFolder(filePath);
  const md5 = crypto.createHash('md5');
  let size = 0;
  const counter = new Transform({
    transform(chunk, _encoding, callback) {
      md5.update(chunk);
      size += chunk.length;
      callback(null, chunk);
    },
  });
  const source = Buffer.isBuffer(content) ? Readable.from([content]) : content;
  // The write stream closes the handle, also when the body fails (a client gone mid-upload).
  await pipeline(source, counter, handle.createWriteStream());
  return { size, md5: md5.digest('hex') };
}

/** Puts `object` into place from `temporary` under its key's lock, if the request's conditions hold. */
async function commit(store, bucket, key, temporary, writeMetadata) {
  try {
    await underKeyLock(bucket, key, async () => {
      await checkWriteConditions(store, bucket, key);
      // Metadata first: an object that appears has its ETag and headers already.
      await writeMetadata();
      await fs.promises.rename(temporary, store.getResourcePath(bucket, key, 'object'));
    });
  } finally {
    await fs.promises.rm(temporary, { force: true });
  }
}

FilesystemStore.prototype.putObject = async function putObject(object) {
  const temporary = temporaryBeside(this.getResourcePath(object.bucket, object.key, 'object'));
  let received;
  try {
    received = await receive(object.content, temporary);
  } catch (error) {
    await fs.promises.rm(temporary, { force: true });
    throw error;
  }
  await commit(this, object.bucket, object.key, temporary, () =>
    this.putMetadata(object.bucket, object.key, object.metadata, received.md5),
  );
  return received;
};

/** Throws S3's answer when the request's `x-amz-copy-source-if-match` does not hold for the source now. */
async function checkCopySourceCondition(store, bucket, key) {
  const { copySourceIfMatch } = writeConditions.getStore() ?? {};
  if (copySourceIfMatch === undefined) return;
  const current = await store.getMetadata(bucket, key).catch((error) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });
  if (!current) throw new S3Error('NoSuchKey', 'The specified key does not exist.', { Key: key });
  if (unquoted(copySourceIfMatch) !== unquoted(current.etag)) {
    throw new S3Error('PreconditionFailed', 'At least one of the pre-conditions you specified did not hold', {
      Condition: 'x-amz-copy-source-If-Match',
    });
  }
}

/**
 * The copy source opened for reading, with its metadata, under its key's lock and after its condition was checked
 * there: a put or delete of the source waits for the lock, and the open file keeps the checked bytes whatever
 * happens to the key after.
 */
function openCopySource(store, bucket, key) {
  return underKeyLock(bucket, key, async () => {
    await checkCopySourceCondition(store, bucket, key);
    let handle;
    try {
      handle = await fs.promises.open(store.getResourcePath(bucket, key, 'object'), 'r');
      const metadata = await fs.promises.readFile(store.getResourcePath(bucket, key, 'metadata.json'));
      return { handle, metadata };
    } catch (error) {
      await handle?.close();
      if (error.code === 'ENOENT')
        throw new S3Error('NoSuchKey', 'The specified key does not exist.', { Key: key });
      throw error;
    }
  });
}

const copyObject = FilesystemStore.prototype.copyObject;
FilesystemStore.prototype.copyObject = async function copyObjectAtomically(
  srcBucket,
  srcKey,
  destBucket,
  destKey,
  replacementMetadata,
) {
  const sourcePath = this.getResourcePath(srcBucket, srcKey, 'object');
  const destinationPath = this.getResourcePath(destBucket, destKey, 'object');
  if (sourcePath === destinationPath) {
    // A copy onto itself replaces the metadata only (s3rver refuses one without REPLACE).
    return underKeyLock(destBucket, destKey, async () => {
      await checkCopySourceCondition(this, srcBucket, srcKey);
      await checkWriteConditions(this, destBucket, destKey);
      return copyObject.call(this, srcBucket, srcKey, destBucket, destKey, replacementMetadata);
    });
  }
  const source = await openCopySource(this, srcBucket, srcKey);
  const temporary = temporaryBeside(destinationPath);
  let received;
  try {
    // The read stream closes the handle when it ends or fails.
    received = await receive(source.handle.createReadStream(), temporary);
  } catch (error) {
    // Closed already when the stream started; not when the temporary file could not be made.
    await source.handle.close().catch(() => undefined);
    await fs.promises.rm(temporary, { force: true });
    throw error;
  }
  await commit(this, destBucket, destKey, temporary, async () => {
    // The MD5 of the bytes copied, not the source's recorded one: the source may be rewritten meanwhile.
    if (replacementMetadata) return this.putMetadata(destBucket, destKey, replacementMetadata, received.md5);
    // The metadata read with the bytes: the source's may have changed since.
    await fs.promises.writeFile(this.getResourcePath(destBucket, destKey, 'metadata.json'), source.metadata);
    await fs.promises.writeFile(this.getResourcePath(destBucket, destKey, 'object.md5'), received.md5);
  });
  return this.getMetadata(destBucket, destKey);
};

// A delete's empty-folder sweep ignores a folder that is gone or no longer empty (a put into it).
const deleteObject = FilesystemStore.prototype.deleteObject;
FilesystemStore.prototype.deleteObject = function deleteObjectTolerantly(bucket, key) {
  return underKeyLock(bucket, key, async () => {
    try {
      await deleteObject.call(this, bucket, key);
    } catch (error) {
      if (error.code !== 'ENOENT' && error.code !== 'ENOTEMPTY') throw error;
    }
  });
};

const [directory, accessKeyId, secretAccessKey, portArgument = '0'] = process.argv.slice(2);
const port = Number(portArgument);
if (!directory || !accessKeyId || !secretAccessKey || !Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write('usage: s3-server.cjs <directory> <accessKeyId> <secretAccessKey> [port 0-65535]\n');
  process.exit(2);
}
DUMMY_ACCOUNT.createKeyPair(accessKeyId, secretAccessKey);
const server = new S3rver({ port, address: '127.0.0.1', directory, silent: true });
server.run().then(
  ({ port }) => process.stdout.write(`${JSON.stringify({ port })}\n`),
  (error) => {
    process.stderr.write(`s3rver failed to start: ${error.stack}\n`);
    process.exit(1);
  },
);
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
