/**
 * `eos query`'s logic: SQL over exactly the committed output of one stream. The engine is loaded first (a missing
 * install fails before anything is fetched), the files the manifests list are fetched to a private temporary
 * directory and checked (collect.ts), exposed as a view named after the stream (`output` or `deadletter`), and
 * the SQL's result is printed; the directory is removed whatever happens.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Stream } from '../ledger/layout.ts';
import { collectCommittedFiles } from './collect.ts';
import { createFilesView, type DuckDbLoader, loadDuckDb, openQueryEngine, runQuery } from './engine.ts';
import { type OutputFormat, writeResult } from './format.ts';
import type { CommittedSource } from './sources.ts';

export interface QueryOptions {
  readonly source: CommittedSource;
  readonly pipeline: string;
  readonly stream: Stream;
  readonly sql: string;
  readonly format: OutputFormat;
  readonly write: (text: string) => void;
  readonly loadDuckDb?: DuckDbLoader;
  /** Where the private temporary directory is made; default the OS's. */
  readonly tempRoot?: string;
}

export interface QuerySummary {
  readonly manifests: number;
  readonly files: number;
  /** Records the manifests list for the stream. */
  readonly records: number;
  /** Rows the SQL returned. */
  readonly rows: number;
}

/** The view's name: the stream's, so `SELECT count(*) FROM output` (or `deadletter`) reads as it says. */
export function viewName(stream: Stream): string {
  return stream;
}

export async function queryCommitted(options: QueryOptions): Promise<QuerySummary> {
  const engine = await openQueryEngine(options.loadDuckDb ?? loadDuckDb);
  const dir = mkdtempSync(join(options.tempRoot ?? tmpdir(), 'eos-query-'));
  try {
    const collected = await collectCommittedFiles({
      source: options.source,
      pipeline: options.pipeline,
      stream: options.stream,
      dir,
    });
    await createFilesView(engine, viewName(options.stream), collected.files);
    const result = await runQuery(engine, options.sql);
    const rows = await writeResult(result, options.format, options.write);
    return {
      manifests: collected.manifests,
      files: collected.files.length,
      records: collected.records,
      rows,
    };
  } finally {
    engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
