/**
 * `eos verify --export-dir`: an `eos local --export` folder checked as its bucket is, after the local parts are
 * gone — the same verdict and counts, and a folder whose copy was changed fails as a bucket would. Exporting again
 * replaces the earlier export of the pipeline.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runVerifyCommand } from '../../cli/verify.ts';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { exportRun } from '../../local/results.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { finalPrefix } from '../../shared/sink/layout.ts';
import { freshResources, uniqueName } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

describe('eos verify --export-dir', () => {
  it('checks an export as its bucket is checked, and fails on a changed copy', async () => {
    const res = await freshResources('verify-export');
    const settings = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: uniqueName('v'),
    });
    const processor = createProcessor({ settings, clients: res.clients });
    const local = createLocalCoordinator({ settings, clients: res.clients });
    await processor.processEvent(mskEvent([...orderRecords(0, 0, 3), ...orderRecords(1, 0, 2)]));
    expect((await local.runCheckpoint()).status).toBe('committed');
    await processor.processEvent(mskEvent(orderRecords(0, 3, 2)));
    expect((await local.runCheckpoint()).status).toBe('committed');
    const dir = mkdtempSync(join(tmpdir(), 'eos-verify-export-'));
    await exportRun(res.clients, res.bucket, finalPrefix(settings.pipelineId), new Map(), dir);

    const quiet = { write: () => {}, writeError: () => {} };
    const pipeline = settings.pipelineId;
    // An earlier export of the same pipeline in the folder (another run's objects) is replaced, not merged.
    const stale = join(
      dir,
      'bucket',
      ...finalPrefix(pipeline).split('/').filter(Boolean),
      'output',
      'stale.ndjson.gz',
    );
    mkdirSync(dirname(stale), { recursive: true });
    writeFileSync(stale, 'another run');
    await exportRun(res.clients, res.bucket, finalPrefix(settings.pipelineId), new Map(), dir);
    expect(existsSync(stale)).toBe(false);
    const fromBucket = await runVerifyCommand({ bucket: res.bucket, pipeline }, quiet);
    const fromDir = await runVerifyCommand({ exportDir: dir, pipeline }, quiet);
    expect(fromBucket.exitCode).toBe(0);
    expect(fromDir).toEqual(fromBucket);
    expect(fromDir.result.rows.output).toBe(7);

    // A copy changed after the export: its checksum no longer matches its manifest.
    const finalDir = join(dir, 'bucket', ...finalPrefix(pipeline).split('/').filter(Boolean), 'output');
    const file = readdirSync(finalDir, { recursive: true, withFileTypes: true }).find((f) => f.isFile())!;
    writeFileSync(join(file.parentPath, file.name), 'changed');
    const changed = await runVerifyCommand({ exportDir: dir, pipeline }, quiet);
    expect(changed.exitCode).toBe(1);
    expect(changed.result.problems.map((p) => p.kind)).toContain('object-mismatch');
  });
});
