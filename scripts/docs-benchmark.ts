/**
 * Rewrites `docs/benchmark.md` from the last benchmark's figures (`bench/results.json`) without rerunning it: for
 * when the page's prose in `bench/report.ts` changes. `npm run bench` measures and writes both.
 *
 *   npx tsx scripts/docs-benchmark.ts
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { outputFormatsSection, spliceOutputFormats } from '../bench/parquet.ts';
import { type BenchResults, renderMarkdown } from '../bench/report.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const BENCH_RESULTS = join(root, 'bench', 'results.json');
export const BENCHMARK_PAGE = join(root, 'docs', 'benchmark.md');

/**
 * The page for these results. Its "Output formats" section comes from another benchmark (`bench/parquet.ts
 * --docs`, which needs DuckDB and takes minutes) and is kept as the current page has it.
 */
export function renderBenchmarkPageOf(results: BenchResults): string {
  const page = renderMarkdown(results);
  const current = existsSync(BENCHMARK_PAGE) ? readFileSync(BENCHMARK_PAGE, 'utf8') : '';
  const section = outputFormatsSection(current);
  return section === undefined ? page : spliceOutputFormats(page, section);
}

export function renderBenchmarkPage(): string {
  return renderBenchmarkPageOf(JSON.parse(readFileSync(BENCH_RESULTS, 'utf8')) as BenchResults);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  writeFileSync(BENCHMARK_PAGE, renderBenchmarkPage());
}
