import type { Plugin } from 'esbuild';

export const leanZodLocales: Plugin;
/** Bundles `entry` to `<outdir>/index.mjs` (the AWS SDK included unless `bundleAwsSdk` is false); returns that path. */
export function bundleHandler(
  entry: string,
  outdir: string,
  options?: { readonly bundleAwsSdk?: boolean },
): Promise<string>;
