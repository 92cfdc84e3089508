import type { Metafile, Plugin } from 'esbuild';

export const leanZodLocales: Plugin;
/** Stands an empty module in for bowser, the SDK's browser user-agent parser, which no Node code path calls. */
export const noBrowserUserAgent: Plugin;
/** Resolves `msk-exactly-once-pipeline/transform` to this package's own transform API, wherever the importer lives. */
export const ownTransformApi: Plugin;
/** Keeps function and class names in this project's own modules (the build minifies every other name). */
export const projectNames: Plugin;
/**
 * Bundles `entry` to `<outdir>/index.mjs` and `<outdir>/chunks/*.mjs` (code only a dynamic import reaches), the AWS
 * SDK included unless `bundleAwsSdk` is false; returns the path of `index.mjs`. `onMetafile` gets esbuild's metafile.
 */
export function bundleHandler(
  entry: string,
  outdir: string,
  options?: { readonly bundleAwsSdk?: boolean; readonly onMetafile?: (metafile: Metafile) => void },
): Promise<string>;
/** Every file of a bundle folder: `index.mjs` first, then its chunks. */
export function bundleFiles(outdir: string): string[];
