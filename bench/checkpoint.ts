/** Checkpoint commit time and AWS calls against the number of staged files it covers. */
import '../local/polyfills.ts';
import { createLocalCoordinator } from '../local/coordinator-runner.ts';
import { CallCounter } from '../shared/aws/call-counter.ts';
import { createAwsClients } from '../shared/aws/clients.ts';
import { parseSettings } from '../shared/config/settings.ts';
import { createProcessor } from '../shared/processor/processor.ts';
import { batchEvent } from './workload.ts';

export interface CheckpointResult {
  stagedFiles: number;
  status: string;
  commitSeconds: number;
  calls: Record<string, number>;
  callsTotal: number;
  transactionItems: number;
  lambdaInvocations: number;
  historyEvents: number;
  /** State transitions (states entered and retried), what Step Functions bills. */
  transitions: number;
}

const PARTITIONS = 4;
const RECORDS_PER_FILE = 5;

export async function measureCheckpoints(
  base: { table: string; bucket: string },
  sizes: readonly number[],
): Promise<CheckpointResult[]> {
  const results: CheckpointResult[] = [];
  for (const files of sizes) {
    const settings = parseSettings({
      ledgerTable: base.table,
      bucket: base.bucket,
      pipelineId: `bench-cp-${files}`,
      idempotencyKey: 'none',
    });
    const clients = createAwsClients();
    const processor = createProcessor({ settings, clients });
    for (let i = 0; i < files; i++) {
      const partition = i % PARTITIONS;
      const from = Math.floor(i / PARTITIONS) * RECORDS_PER_FILE;
      await processor.processEvent(batchEvent(partition, from, RECORDS_PER_FILE));
    }
    const calls = new CallCounter().attach(clients);
    const started = performance.now();
    const outcome = await createLocalCoordinator({ settings, clients }).runCheckpoint();
    const seconds = (performance.now() - started) / 1000;
    results.push({
      stagedFiles: files,
      status: outcome.status,
      commitSeconds: Number(seconds.toFixed(3)),
      calls: calls.snapshot(),
      callsTotal: calls.total(),
      transactionItems: calls.transactionItems(),
      lambdaInvocations: outcome.invocations.length,
      historyEvents: outcome.events,
      transitions: outcome.transitions,
    });
    process.stderr.write(
      `[bench] checkpoint of ${files} staged files: ${outcome.status} in ${seconds.toFixed(2)}s\n`,
    );
  }
  return results;
}
