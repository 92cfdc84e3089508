/**
 * Where a module of this project is when the construct needs its file (a Lambda handler's entry, which esbuild
 * bundles at synth): the TypeScript source in the repository, its compiled `.js` when the project runs as an
 * installed package, which ships compiled JavaScript and no sources (scripts/build-package.mjs).
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** `relativeTs` (like `../functions/coordinator.ts`) resolved against `base` (the caller's `import.meta.url`). */
export function projectModule(relativeTs: string, base: string | URL): string {
  const source = fileURLToPath(new URL(relativeTs, base));
  const compiled = source.replace(/\.ts$/, '.js');
  return existsSync(source) || !existsSync(compiled) ? source : compiled;
}
