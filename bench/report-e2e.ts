/** The end-to-end part of `docs/benchmark.md`: exactly-once against at-least-once over the whole pipeline. */
import type { ByteAttribution, E2eResult, VisibilityResult } from './e2e.ts';
import type { StackDefaultsLatency } from './latency.ts';
import { round1, spread, verdict } from './report-format.ts';

/** Why exactly-once's end-to-end throughput falls short of 0.8 × at-least-once's, in this run's figures. */
export function e2eExplanation(e: E2eResult): string[] {
  const eo = e.exactlyOnce;
  const steps = Object.entries(eo.stepMs)
    .map(([step, ms]) => `${step} ${ms}`)
    .join(', ');
  const prepare = round1(
    eo.bytesPerRecordByKind.prepareStagedRead + eo.bytesPerRecordByKind.candidateWritten,
  );
  return [
    `- **End to end: ${spread(e.ratio)} against 0.8.** Exactly-once's processors alone are not the gap: with its`,
    `  checkpoints deferred to the end of the run they drain the backlog at ${spread(e.deferred.processorRatio)} ×`,
    `  at-least-once's rate. With checkpoints on their ${e.config.checkpointIntervalMs} ms schedule the same drain runs at`,
    `  ${spread(e.deferred.checkpointShare)} × that: a checkpoint over a backlog takes ${eo.executionMs} ms (median; ms per`,
    `  step: ${steps}; ${eo.betweenStepsMs} ms between steps), so one is running nearly all the time, and here its`,
    '  Lambdas share one Node process, one DynamoDB Local and one s3rver on two cores with the processors. Its S3',
    `  work is ${prepare} B per record read and written by prepare (each staged object read once, each candidate`,
    `  written once; promote copies server-side) and ${round1(eo.bytesPerRecordByKind.workWritten + eo.bytesPerRecordByKind.workRead)} B of plans.`,
    "  On AWS the coordinator's steps run in Lambdas of their own, so they would not take CPU from the processors;",
    '  how much of the gap remains there is not measured here.',
  ];
}

/** What a visibility latency is made of, in this run's figures. */
function visibilityNotes(
  paced: readonly VisibilityResult[],
  partitions: number,
  batchSize: number,
): string[] {
  if (paced.length === 0) return [];
  const window = paced[0]!.batchingWindowMs;
  const perPartition = paced[0]!.paceRecordsPerSecond / partitions;
  const fills = (batchSize / perPartition) * 1000 <= window;
  const byInterval = [...paced].sort((a, b) => a.checkpointIntervalMs - b.checkpointIntervalMs);
  const shortest = byInterval[0]!;
  const longest = byInterval.at(-1)!;
  return [
    'A record’s latency is made of three waits. First the event source mapping’s batching window: at',
    `${perPartition} records/s per partition a batch of ${batchSize} ${fills ? 'fills within' : 'does not fill within'} the`,
    `${window} ms window (the emulator’s default, as the MSK mapping’s)${
      fills
        ? ', so batches leave as soon as they are full.'
        : `: each batch waits it out, so a record waits up to ${window} ms, half of it on average, before it is staged.`
    }`,
    'Then the wait for the next checkpoint to begin (up to one interval, or until the running checkpoint ends), then that checkpoint',
    `(“one checkpoint”). At ${longest.checkpointIntervalMs} ms the interval dominates: p50 ${longest.p50Ms.median} ms, p99 ${longest.p99Ms.median} ms. At`,
    `${shortest.checkpointIntervalMs} ms checkpoints run back to back (p50 ${shortest.p50Ms.median} ms, p99 ${shortest.p99Ms.median} ms) and what remains is the`,
    'batching window and about one checkpoint: that is the floor a shorter interval cannot go under.',
    'The deployed default is one checkpoint a minute (`checkpointIntervalMinutes`): by the same arithmetic, not',
    'measured here, p50 is about 30 s and p99 about 60 s, plus the batching window and one checkpoint.',
  ];
}

/** Each kind of S3 traffic through Lambda, as the bytes table names it. */
const BYTE_KINDS: Array<[keyof ByteAttribution, string]> = [
  ['stagedWritten', 'processor: staged objects written'],
  ['directFinalWritten', 'processor: final objects written directly'],
  ['prepareStagedRead', 'prepare: staged objects read to verify and merge them'],
  ['candidateWritten', 'prepare: candidate final objects written'],
  ['promoteRead', 'promote: objects read (it copies candidates server-side)'],
  ['finalWritten', 'coordinator: final objects written through Lambda'],
  ['manifestWritten', 'commit: manifests written'],
  ['workWritten', 'coordinator working objects (plans, promoted markers) written'],
  ['workRead', 'coordinator working objects read'],
  ['other', 'anything else'],
];

/** The end-to-end section: how it is measured, its figures, where the time and the bytes go, visibility. */
export function e2eSection(
  e: E2eResult | undefined,
  visibility: readonly VisibilityResult[] | undefined,
): string[] {
  if (!e) return [];
  const paced = visibility ?? [];
  return [
    ...e2eMethod(e),
    ...e2eFigures(e, paced),
    ...e2eTimeSpent(e),
    ...e2eBytes(e, paced),
    ...visibilitySection(e, paced),
  ];
}

/** How the end-to-end runs are made and what a record being "out" means. */
function e2eMethod(e: E2eResult): string[] {
  return [
    '## End to end: the whole pipeline, exactly-once against at-least-once',
    '',
    '`bench/e2e.ts` runs the pipeline as `eos local` does, faults off: the MSK event-source emulator, processor',
    'containers, the coordinator state machine checkpointing on its schedule, promote and commit, each run on a',
    `fresh table, bucket and pipeline id. ${e.config.records} generated orders per run, appended before the first`,
    `poll (a backlog), ${e.config.partitions} partitions, batches of ${e.config.batchSize}, a checkpoint every`,
    `${e.config.checkpointIntervalMs} ms (\`eos local\`'s default), offset-only dedupe; ${e.config.pairs} rounds after a`,
    'warm-up, each round running exactly-once, at-least-once and exactly-once with its checkpoints deferred to the',
    'end (the breakdown) in an order that rotates round by round. Figures are medians, with the smallest and the',
    'largest of the rounds in brackets.',
    '',
    'A record is out when its rows are in the committed output: for exactly-once when the commit step of the',
    "checkpoint whose manifest covers it returned, for at-least-once when its batch was acknowledged (the processor's",
    'rows are final as written). **Sustained** throughput is the slope of the out-count from the first point with',
    '10 % of the input out to the last point before the log drained — the cold start and the one-off final',
    'checkpoint left out; **whole run** is first poll to the last record out.',
  ];
}

/** The end-to-end figures against their goals, and each mode's per-run figures. */
function e2eFigures(e: E2eResult, paced: readonly VisibilityResult[]): string[] {
  const eo = e.exactlyOnce;
  const alo = e.atLeastOnce;
  const atDefault = paced.find((v) => v.checkpointIntervalMs === e.config.checkpointIntervalMs);
  const short = paced.filter((v) => v.checkpointIntervalMs < e.config.checkpointIntervalMs);
  return [
    '',
    '| figure | median (min–max) | goal | verdict |',
    '|---|---|---|---|',
    `| \`ratio_eo_alo_e2e\`: exactly-once ÷ at-least-once, sustained | ${spread(e.ratio)} | ≥ 0.8 | ${verdict(e.ratio.median >= 0.8)} |`,
    `| the same, whole run (final checkpoint included) | ${spread(e.wholeRatio)} | — | — |`,
    `| \`bytes_through_lambda_ratio\`: S3 bytes through Lambda per committed record, exactly-once ÷ at-least-once | ${spread(e.bytesRatio)} | as low as possible | — |`,
    ...(atDefault
      ? [
          `| \`visibility_p50_ms\` / \`visibility_p99_ms\` at the ${atDefault.checkpointIntervalMs} ms interval | ${spread(atDefault.p50Ms, ' ms')} / ${spread(atDefault.p99Ms, ' ms')} | — | — |`,
        ]
      : []),
    ...short.map(
      (v) =>
        `| visibility p50 / p99 at a short ${v.checkpointIntervalMs} ms interval | ${spread(v.p50Ms, ' ms')} / ${spread(v.p99Ms, ' ms')} | — | — |`,
    ),
    '',
    '| per run | exactly-once | at-least-once |',
    '|---|---|---|',
    `| sustained records/s | ${spread(eo.recordsPerSecond)} | ${spread(alo.recordsPerSecond)} |`,
    `| whole-run records/s | ${spread(eo.wholeRecordsPerSecond)} | ${spread(alo.wholeRecordsPerSecond)} |`,
    `| first poll → every record acknowledged (ms) | ${spread(eo.drainMs)} | ${spread(alo.drainMs)} |`,
    `| drained → last commit (ms) | ${spread(eo.tailMs)} | ${spread(alo.tailMs)} |`,
    `| checkpoints committed | ${spread(eo.checkpointsCommitted)} | ${spread(alo.checkpointsCommitted)} |`,
    `| S3 bytes through Lambda per committed record | ${spread(eo.bytesPerRecord)} | ${spread(alo.bytesPerRecord)} |`,
    `| final objects per 1,000 records | ${eo.finalObjectsPer1000Records} | ${alo.finalObjectsPer1000Records} |`,
  ];
}

/** Where exactly-once spends the time at-least-once does not: its processors, and the checkpoints beside them. */
function e2eTimeSpent(e: E2eResult): string[] {
  const eo = e.exactlyOnce;
  return [
    '',
    '### Where exactly-once spends the extra time',
    '',
    `- **The processors alone**: with no checkpoint until the log drained, exactly-once drains at`,
    `  ${spread(e.deferred.drainRecordsPerSecond)} records/s, ${spread(e.deferred.processorRatio)} × at-least-once's drain rate`,
    '  (the staging transaction with its fence condition against at-least-once’s keyed-state update; one',
    `  PutObject each). The final checkpoint over the whole backlog then takes ${spread(e.deferred.tailMs, ' ms')}.`,
    `- **Checkpoints running beside them**: on the ${e.config.checkpointIntervalMs} ms schedule, exactly-once drains at`,
    `  ${spread(e.deferred.checkpointShare)} × its rate with checkpoints deferred (${spread(e.drainRatio)} × at-least-once's).`,
    `  A checkpoint over a backlog takes ${eo.executionMs} ms from begin to the last step, so the next one starts as`,
    '  soon as it ends and one is running nearly all the time; locally its steps share the Node process, DynamoDB',
    '  Local and s3rver (two cores) with the processors. Per committed checkpoint, median span of each step (ms):',
    '',
    `| ${Object.keys(eo.stepMs).join(' | ')} | between steps | whole execution |`,
    `|${Object.keys(eo.stepMs)
      .map(() => '---|')
      .join('')}---|---|`,
    `| ${Object.values(eo.stepMs).join(' | ')} | ${eo.betweenStepsMs} | ${eo.executionMs} |`,
    '',
    '  On AWS each step is a Lambda invocation of its own and takes no CPU from the processors’ Lambdas; what it',
    '  adds there is DynamoDB and S3 traffic (the bytes below) and latency. How much of the throughput gap would',
    '  remain on AWS is not measured here.',
  ];
}

/** The S3 bytes through Lambda per committed record, by kind, and where exactly-once's extra bytes go. */
function e2eBytes(e: E2eResult, paced: readonly VisibilityResult[]): string[] {
  const eo = e.exactlyOnce;
  const alo = e.atLeastOnce;
  const kinds = eo.bytesPerRecordByKind;
  return [
    '',
    '### S3 bytes through Lambda, per committed record (`bytes_through_lambda_ratio`)',
    '',
    '| bytes | exactly-once | at-least-once |',
    '|---|---|---|',
    ...BYTE_KINDS.map(
      ([kind, label]) =>
        `| ${label} | ${eo.bytesPerRecordByKind[kind]} | ${alo.bytesPerRecordByKind[kind]} |`,
    ),
    `| **total** | ${spread(eo.bytesPerRecord)} | ${spread(alo.bytesPerRecord)} |`,
    '',
    'Counted by SDK middleware on the processor’s and the coordinator’s S3 clients (`ByteCounter` in',
    '`shared/aws/call-counter.ts`): PutObject bodies written, GetObject bodies read; promote’s server-side',
    'CopyObject of each candidate into place moves no bytes through Lambda and counts nothing.',
    '',
    `Exactly-once moves each record’s bytes three times: the processor stages them (${kinds.stagedWritten} B), prepare`,
    `reads them once to verify them against the ledger (${kinds.prepareStagedRead} B) and writes the merged candidate`,
    `(${kinds.candidateWritten} B); the rest is plans (${round1(kinds.workWritten + kinds.workRead)} B) and manifests`,
    `(${kinds.manifestWritten} B). Merging keeps the files per day down: exactly-once writes`,
    `${eo.finalObjectsPer1000Records} final objects per 1,000 records here, at-least-once ${alo.finalObjectsPer1000Records}`,
    '(one per batch).',
    ...(paced.length
      ? [
          '',
          `At a steady ${paced[0]!.paceRecordsPerSecond} records/s (the visibility runs below) checkpoints are small and`,
          'plans and manifests weigh more per record:',
          '',
          '| checkpoint interval (ms) | S3 bytes through Lambda per record |',
          '|---|---|',
          ...paced.map((v) => `| ${v.checkpointIntervalMs} | ${v.bytesPerRecord} |`),
        ]
      : []),
  ];
}

/** Record appended → visible in committed output, per checkpoint interval, and what the latency is made of. */
function visibilitySection(e: E2eResult, paced: readonly VisibilityResult[]): string[] {
  return [
    '',
    '### Visibility latency',
    '',
    `Input appended at a steady ${paced[0]?.paceRecordsPerSecond ?? '—'} records/s (below capacity), exactly-once; each`,
    'record’s time from its append to the end of the commit step of the checkpoint whose manifest covers it',
    '(previous cut < offset ≤ cut). Every interval runs once per round, the order rotated.',
    '',
    '| checkpoint interval (ms) | runs | records each | p50 (ms) | p99 (ms) | max (ms) | one checkpoint (ms) | commit every (ms) | checkpoints |',
    '|---|---|---|---|---|---|---|---|---|',
    ...paced.map(
      (v) =>
        `| ${v.checkpointIntervalMs} | ${v.runs} | ${v.records} | ${spread(v.p50Ms)} | ${spread(v.p99Ms)} | ${spread(v.maxMs)} | ${v.checkpointMs} | ${spread(v.commitPeriodMs)} | ${spread(v.checkpointsCommitted)} |`,
    ),
    '',
    ...visibilityNotes(paced, e.config.partitions, e.config.batchSize),
    '',
  ];
}

/** Arrival → committed output at the stack's defaults: what the cost-chosen batching window costs in freshness. */
export function defaultsLatencySection(l: StackDefaultsLatency | undefined): string[] {
  if (!l) return [];
  return [
    '',
    "### Latency at the stack's defaults",
    '',
    `The defaults a deploy without props gets: a checkpoint every ${l.checkpointIntervalMs / 1000} s, a batching window of`,
    `${l.batchingWindowMs / 1000} s, batches of at most ${l.batchSize} records. Input appended at ${l.paceRecordsPerSecond} records/s over`,
    `${l.partitions} partitions for ${l.records / l.paceRecordsPerSecond} s (no batch fills, so each waits out the window), exactly-once,`,
    `${l.checkpointsCommitted} checkpoints (median ${l.checkpointMs} ms each here): p50 ${l.p50Ms} ms, p99 ${l.p99Ms} ms, max`,
    `**${l.maxMs} ms** from a record's arrival to the end of the commit that makes it visible, against the bound of one`,
    `interval plus 10 s (${l.boundMs} ms). A record waits at most the window, then at most one interval for the next`,
    'checkpoint to begin, then that checkpoint: the window is what the margin pays for, and on AWS a checkpoint takes',
    'a few seconds more than here (each step a Lambda invocation), which the rest of the margin absorbs. The window',
    'is chosen by cost: at 10,000 records/s over 100 partitions a 5 s window fills batches of 500 records where a 1 s',
    'window makes five times as many batches of 100, and every exactly-once batch is one staged file and one',
    'transaction (the monthly cost section prices both).',
  ];
}
