/**
 * Rewrites `docs/benchmark.md` from the last benchmark's figures (`bench/results.json`) without rerunning it: for
 * when the page's prose in `bench/report.ts` changes. `npm run bench` measures and writes both.
 *
 *   npx tsx scripts/docs-benchmark.ts
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BenchResults, renderMarkdown } from '../bench/report.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const BENCH_RESULTS = join(root, 'bench', 'results.json');
export const BENCHMARK_PAGE = join(root, 'docs', 'benchmark.md');

export function renderBenchmarkPage(): string {
  return renderMarkdown(JSON.parse(readFileSync(BENCH_RESULTS, 'utf8')) as BenchResults);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  writeFileSync(BENCHMARK_PAGE, renderBenchmarkPage());
}
