/**
 * The installable package as `npm run build` makes it, built once per content of its inputs and kept in
 * node_modules/.cache/eos-package/<sha256>. The key hashes every file the build can read: the compiled folders
 * (tsconfig.build.json's include), the scripts it copies or imports, the root manifests and configurations, and
 * the lock file (the TypeScript compiler and every type package at their locked versions). Any change to one of
 * them is a new key and so a fresh build; an unchanged tree gives byte-for-byte the build tsc made before.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** What the build reads: tsconfig.build.json's include, the scripts folder (copied and imported files), the root. */
const INPUT_FOLDERS = ['shared', 'functions', 'infra', 'cli', 'local', 'scripts'];
const INPUT_FILES = [
  'package.json',
  'package-lock.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'LICENSE',
  'README.md',
];

function* filesUnder(root: string, dir: string): Generator<string> {
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* filesUnder(root, path);
    else if (entry.isFile()) yield path;
  }
}

/** SHA-256 over every input's path and content, in a fixed order. */
export function packageInputsKey(root: string): string {
  const files = [
    ...INPUT_FILES.filter((file) => existsSync(join(root, file))),
    ...INPUT_FOLDERS.flatMap((dir) => [...filesUnder(root, dir)]),
  ].sort();
  const hash = createHash('sha256');
  for (const file of files)
    hash
      .update(`${file}\0`)
      .update(readFileSync(join(root, file)))
      .update('\0');
  return hash.digest('hex');
}

/**
 * Puts the package built from `root` into `outDir`: copied from the cache when the same inputs were built before,
 * else built there with `npm run build` (then kept). `EOS_TEST_CACHE=off` always builds.
 */
export function builtPackage(root: string, outDir: string, npm: string): { cached: boolean } {
  const useCache = process.env.EOS_TEST_CACHE !== 'off';
  const cached = join(root, 'node_modules', '.cache', 'eos-package', packageInputsKey(root));
  if (useCache && existsSync(cached) && statSync(cached).isDirectory()) {
    cpSync(cached, outDir, { recursive: true });
    return { cached: true };
  }
  execFileSync(npm, ['run', '--silent', 'build', '--', outDir], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, npm_config_update_notifier: 'false', npm_config_fund: 'false' },
  });
  if (useCache) {
    // Copied under a temporary name, then renamed: a concurrent run never copies half a build.
    const partial = `${cached}.${process.pid}.partial`;
    rmSync(partial, { recursive: true, force: true });
    cpSync(outDir, partial, { recursive: true });
    try {
      renameSync(partial, cached);
    } catch {
      // Another run stored the same build first.
      rmSync(partial, { recursive: true, force: true });
    }
  }
  return { cached: false };
}
