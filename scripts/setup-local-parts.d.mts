export const PACKAGE: string;
export const INTEGRITY: string;
export const INTEGRITY_MARKER: string;
export const HASH_MANIFEST: string;
export const DEFAULT_TARGET: string;
/** SHA-256 of DynamoDBLocal.jar and of each native library kept, by path in the install. */
export const PINNED_SHA256: Readonly<Record<string, string>>;
/** {@link codeDigest} of the pinned install. */
export const PINNED_CODE_DIGEST: string;
export interface Pins {
  readonly files: Readonly<Record<string, string>>;
  readonly codeDigest: string;
}
export const PINS: Pins;
/** One line of the setup's output: what DynamoDB Local exposes and why. */
export const EXPOSURE_NOTE: string;
/** SHA-256 (hex) of every file under `dir`, by relative path (the manifest and marker excluded). */
export function hashTree(dir: string): Record<string, string>;
/** One SHA-256 over the code files (jars, native libraries) of `hashes`. */
export function codeDigest(hashes: Record<string, string>): string;
/** The first file of `hashes` that differs from `pins`, or undefined when every pinned file and the code match. */
export function checkPins(hashes: Record<string, string>, pins?: Pins): string | undefined;
export function sealInstall(dir: string, integrity?: string): void;
/** The first reason the install in `dir` cannot be trusted, or undefined when it can. */
export function verifyInstall(dir: string, integrity?: string, pins?: Pins): string | undefined;
export function installDynamoDbLocal(options?: {
  readonly target?: string;
  readonly fetch?: (staging: string, cacheDir: string) => void;
  readonly integrity?: string;
  readonly pins?: Pins;
}): 'cached' | 'installed';
