/**
 * Step Functions limits with a large checkpoint: 2,000 staged files through the synthesized definition in the
 * interpreter, one shard per partition moved (the most a checkpoint has). Payloads and state stay references (256
 * KB limit), the history stays small (25,000 events), the Map fan-out is bounded, and the files are compacted into a
 * few final objects. None of these grows with the files a shard covers (the state names shards, never files), so
 * more files would only take longer: the benchmark commits checkpoints of 10,000 (`commit_s_1000p`).
 */
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { MAX_SHARDS } from '../../shared/coordinator/definition.ts';
import type { Manifest } from '../../shared/sink/manifest.ts';
import { readManifests } from '../../shared/sink/reader.ts';
import { type SynthesizedCoordinator, synthesizeCoordinator } from '../support/asl.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { expectExactlyOnce, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
let deployed: SynthesizedCoordinator;

beforeAll(async () => {
  res = await freshResources('limits');
  deployed = synthesizeCoordinator();
});

describe('Step Functions limits', () => {
  it('a checkpoint covering 2,000 staged files stays within the Step Functions limits', async () => {
    const settings = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: uniqueName('big'),
    });
    const partitions = 20;
    const specs = Array.from({ length: 2000 }, (_, i) => ({
      partition: i % partitions,
      firstOffset: Math.floor(i / partitions) * 2,
      lastOffset: Math.floor(i / partitions) * 2 + 1,
    }));
    const t0 = performance.now();
    await stageFiles(res.clients, settings, specs, randomUUID().slice(0, 8));
    const t1 = performance.now();
    const local = createLocalCoordinator({
      settings,
      clients: res.clients,
      // One shard per partition: the fan-out reaches the most shards a checkpoint has.
      partitionsPerShard: 1,
      ...deployed.runOptions,
    });
    const outcome = await local.runCheckpoint();
    expect(outcome.status).toBe('committed');
    const byStep: Record<string, number> = {};
    for (const i of outcome.invocations) byStep[i.step] = Math.max(byStep[i.step] ?? 0, i.durationMs);
    console.info('staging ms', Math.round(t1 - t0), 'run ms', Math.round(performance.now() - t1));
    console.info('slowest invocation per step (ms):', byStep, 'events:', outcome.events);
    // 256 KB per payload and state; 25,000 history events per execution.
    const largestPayload = Math.max(
      ...outcome.invocations.map((i) => Math.max(i.payloadBytes, i.resultBytes)),
    );
    expect(largestPayload).toBeLessThan(1_000);
    expect(outcome.maxStateBytes).toBeLessThan(2_000);
    expect(outcome.events).toBeLessThan(1_000);
    expect(outcome.invocations.filter((i) => i.step === 'prepare')).toHaveLength(MAX_SHARDS);
    await expectExactlyOnce(
      res.clients,
      settings,
      Object.fromEntries(Array.from({ length: partitions }, (_, p) => [`orders#${p}`, range(0, 200)])),
    );
    const manifests: Manifest[] = [];
    for await (const m of readManifests({
      s3: res.clients.s3,
      bucket: res.bucket,
      pipeline: settings.pipelineId,
    })) {
      manifests.push(m);
    }
    // Compacted: one final object per partition, not 2,000.
    expect(manifests).toHaveLength(1);
    expect(manifests[0]!.files).toHaveLength(partitions);
    expect(manifests[0]!.files.reduce((sum, f) => sum + f.recordCount, 0)).toBe(4_000);
    // Minutes on a loaded 2-core machine (the interpreter and both local servers share it).
  }, 300_000);
});
