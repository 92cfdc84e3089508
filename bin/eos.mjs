#!/usr/bin/env node
// Runs cli/eos.ts through tsx's loaders in this process, so `npx eos …` works without a build step.
// tsx registers through module.register (Node >= 20.6); NODE_OPTIONS stay as the user set them, and the S3
// server's own --openssl-legacy-provider flag is passed by local/parts.ts to its child process only.
import './tsx-loaders.mjs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const cli = join(dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'eos.ts');
const { main } = await import(pathToFileURL(cli).href);
process.exitCode = await main(process.argv);
