export const PACKAGE: string;
export const INTEGRITY: string;
export const INTEGRITY_MARKER: string;
export const HASH_MANIFEST: string;
export const DEFAULT_TARGET: string;
/** SHA-256 (hex) of every file under `dir`, by relative path (the manifest and marker excluded). */
export function hashTree(dir: string): Record<string, string>;
export function sealInstall(dir: string, integrity?: string): void;
/** The first reason the install in `dir` cannot be trusted, or undefined when it can. */
export function verifyInstall(dir: string, integrity?: string): string | undefined;
export function installDynamoDbLocal(options?: {
  readonly target?: string;
  readonly fetch?: (staging: string, cacheDir: string) => void;
  readonly integrity?: string;
}): 'cached' | 'installed';
