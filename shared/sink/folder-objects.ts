/**
 * A folder copy of a bucket, as `eos local --export DIR` writes it (`DIR/bucket/<key>`, keys as paths): listed and
 * read by key as the bucket would be, for `eos verify --export-dir` and `eos read --export-dir` after the local
 * parts are gone. Keys never leave the folder.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';

export interface KeyedObjects {
  /** Every key under `prefix`, sorted. */
  list(prefix: string): Promise<string[]>;
  /** A key's bytes, or undefined when there is no such object. */
  get(key: string): Promise<Buffer | undefined>;
}

export function folderObjects(dir: string): KeyedObjects {
  const root = join(dir, 'bucket');
  const pathOf = (key: string): string | undefined =>
    key.split('/').some((part) => part === '..' || part === '.') ? undefined : join(root, ...key.split('/'));
  return {
    list: async (prefix) => {
      if (!existsSync(root)) return [];
      return readdirSync(root, { recursive: true, withFileTypes: true })
        .filter((entry) => entry.isFile())
        .map((entry) => relative(root, join(entry.parentPath, entry.name)).split(sep).join('/'))
        .filter((key) => key.startsWith(prefix))
        .sort();
    },
    get: async (key) => {
      const path = pathOf(key);
      return path !== undefined && existsSync(path) ? readFileSync(path) : undefined;
    },
  };
}
