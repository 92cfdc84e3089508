#!/usr/bin/env node
// Installs the local AWS parts that do not come from package.json: AWS's DynamoDB Local.
//
// The jar ships inside the npm package `amplify-dynamodb-simulator`. Installing that package would drag in
// hundreds of dependencies and a build script that downloads from the internet, so we `npm pack` the exact
// version, check the tarball against a pinned integrity, and extract only `package/emulator` into an ignored
// cache folder. Idempotent: a second run with the cache present does nothing.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const PACKAGE = 'amplify-dynamodb-simulator@2.9.30';
const INTEGRITY =
  'sha512-xTeeRLvzEfqyd5lh3bH4c0kHvSHHmmhD5ZDsHFKAQ5g2Zl6JqlFdutaQhCLHzxEp6Ry1o7TB6niIoXuQAnSewQ==';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cache = join(root, '.cache');
const target = join(cache, 'dynamodb-local');
const marker = join(target, '.integrity');

function log(message) {
  process.stderr.write(`[setup] ${message}\n`);
}

function checkJava() {
  const probe = spawnSync('java', ['-version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    log('WARNING: `java` was not found on PATH. DynamoDB Local needs a Java runtime (17 or later).');
    log('         Debian/Ubuntu: apt-get install -y default-jre-headless');
    return false;
  }
  return true;
}

function installDynamoDbLocal() {
  if (existsSync(marker) && readFileSync(marker, 'utf8') === INTEGRITY) {
    return;
  }
  mkdirSync(cache, { recursive: true });
  log(`fetching ${PACKAGE} (DynamoDB Local, ~60 MB) into .cache/ ...`);
  const packed = execFileSync('npm', ['pack', PACKAGE, '--json', '--pack-destination', cache], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const [{ filename }] = JSON.parse(packed);
  const tarball = join(cache, filename);
  const digest = `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`;
  if (digest !== INTEGRITY) {
    rmSync(tarball, { force: true });
    throw new Error(`integrity mismatch for ${PACKAGE}: expected ${INTEGRITY}, got ${digest}`);
  }
  const staging = join(cache, 'dynamodb-local.tmp');
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  execFileSync('tar', ['-xzf', tarball, '-C', staging, '--strip-components=2', 'package/emulator'], {
    stdio: 'inherit',
  });
  // Only the Linux native libraries are needed here; the Windows and macOS ones are half the size.
  for (const lib of ['sqlite4java-win32-x64.dll', 'sqlite4java-win32-x86.dll', 'libsqlite4java-osx.dylib']) {
    rmSync(join(staging, 'DynamoDBLocal_lib', lib), { force: true });
  }
  if (!existsSync(join(staging, 'DynamoDBLocal.jar'))) {
    throw new Error(`${PACKAGE} did not contain emulator/DynamoDBLocal.jar`);
  }
  writeFileSync(join(staging, '.integrity'), INTEGRITY);
  rmSync(target, { recursive: true, force: true });
  renameSync(staging, target);
  rmSync(tarball, { force: true });
  log(`DynamoDB Local installed in ${target}`);
}

checkJava();
installDynamoDbLocal();
