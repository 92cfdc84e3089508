/** The `eos local` report as a table for the terminal (the JSON form is the {@link RunReport} itself). */
import { formatVerifyResult } from '../shared/sink/verify.ts';
import { FAULT_KINDS } from './faults.ts';
import type { RunReport } from './runner.ts';

const WIDTH = 32;

function row(label: string, value: string | number): string {
  return `  ${label.padEnd(WIDTH)}${value}`;
}

function faultsLine(report: RunReport): string {
  const fired = FAULT_KINDS.filter((kind) => report.faults[kind] > 0).map(
    (kind) => `${kind} ${report.faults[kind]}`,
  );
  return fired.length === 0 ? 'none' : fired.join(', ');
}

function checkpointsLine(report: RunReport): string {
  const c = report.checkpoints;
  const extra = [
    c.empty ? `${c.empty} empty` : '',
    c.busy ? `${c.busy} busy` : '',
    c.incomplete ? `${c.incomplete} incomplete (rolled forward later)` : '',
    c.failed ? `${c.failed} failed` : '',
    c.handedOff ? `${c.handedOff} run on the Standard workflow after a hand-off` : '',
  ].filter(Boolean);
  return `${c.committed} committed, ${c.aborted} aborted${extra.length ? `, ${extra.join(', ')}` : ''}`;
}

/**
 * The share of the run's records that were dead-lettered, when it is more than half: a run that rejects most of
 * its input is exactly-once about the wrong thing (usually a transform that does not fit the input).
 */
export function deadLetterMajority(report: RunReport): number | undefined {
  const { in: records, deadLettered } = report.records;
  if (records === 0 || deadLettered * 2 <= records) return undefined;
  return Math.min(100, Math.round((deadLettered * 100) / records));
}

/**
 * How many records the idempotency-key source found nothing in, and what became of them; undefined when none. A
 * source that names the wrong field (`json:deviceid` for `deviceId`) finds nothing in any record: the run must say
 * so, not pass quietly.
 */
export function missingKeysLine(report: RunReport): string | undefined {
  const missing = report.records.missingKeys;
  if (missing === undefined || missing.count === 0) return undefined;
  const fate = missing.handling === 'dead-letter' ? 'dead-lettered' : 'processed with offset dedupe only';
  const records = missing.count === 1 ? 'record' : 'records';
  return `${missing.count.toLocaleString('en-US')} ${records} had no idempotency key (${missing.source}): ${fate}`;
}

function verdictLine(report: RunReport): string {
  const verdict =
    report.verdict === 'exactly-once' ? 'EXACTLY-ONCE' : `NOT exactly-once: ${report.violations.join('; ')}`;
  const share = deadLetterMajority(report);
  const buts = [
    ...(share === undefined
      ? []
      : [`${share}% of records were dead-lettered: is --transform right for this input?`]),
    ...(report.records.missingKeys?.count ? [`${missingKeysLine(report)}: is --idempotency-key right?`] : []),
  ];
  return buts.length === 0 ? verdict : `${verdict} — but ${buts.join('; ')}`;
}

/** The Iceberg table's lines: where it is and its snapshots, then what icebird read back from it. */
function tableLines(report: RunReport): string[] {
  const table = report.table;
  if (table === undefined) return [];
  const published =
    table.publishedUpTo === table.committedUpTo
      ? `published up to checkpoint ${table.publishedUpTo}`
      : `published up to checkpoint ${table.publishedUpTo} of ${table.committedUpTo} committed`;
  const wrong = [
    table.missing ? `${table.missing} missing` : '',
    table.extra ? `${table.extra} extra` : '',
    table.differing ? `${table.differing} differing` : '',
  ].filter(Boolean);
  const rows =
    wrong.length === 0 && table.rows === table.committedRows
      ? 'each committed row once, contents equal'
      : `NOT each committed row once: ${wrong.join(', ')}`;
  return [
    row('iceberg table', table.location),
    row(
      'iceberg snapshots',
      `${table.snapshots}${table.snapshots === table.committedUpTo ? ', one per committed checkpoint' : ` for ${table.committedUpTo} committed checkpoints`}; ${published}`,
    ),
    row('iceberg rows (icebird)', `${table.rows} read back of ${table.committedRows} committed: ${rows}`),
  ];
}

export function formatReport(report: RunReport): string {
  const r = report.records;
  const o = report.outcome;
  const lines = [
    `eos local: ${report.guarantee}, ${report.partitions} partitions, seed ${report.seed}, faults ${report.faultSpec}`,
    row('records in', r.in),
    row('committed (output rows)', r.committed),
    row('dead-lettered', r.deadLettered),
    row('expected (distinct records)', r.expected),
    row('duplicates dropped by offset', r.duplicatesDroppedByOffset),
    row('duplicates dropped by key', r.duplicatesDroppedByKey),
    ...(r.keyConflicts ? [row('key conflicts (dead-lettered)', r.keyConflicts)] : []),
    ...(missingKeysLine(report) === undefined ? [] : [row('no idempotency key', missingKeysLine(report)!)]),
    row('faults injected', faultsLine(report)),
    row(
      'processor invocations',
      `${report.invocations.total} (${report.invocations.failed} failed and retried, ${report.invocations.lostCommits} offset commits lost)`,
    ),
    row('checkpoints', checkpointsLine(report)),
    ...(report.epochsOpened === undefined
      ? []
      : [
          row(
            'topic recreated',
            `${report.epochsOpened} stopped partition(s) moved to epoch 1 (as eos epoch --start-new); judged per epoch`,
          ),
        ]),
    ...(report.redrive === undefined
      ? []
      : [
          row(
            'redrive (fixed transform)',
            `${report.redrive.sent} sent${report.redrive.crashed ? ' (the first run crashed and was run again)' : ''}: ${report.redrive.output} output rows, ${report.redrive.deadLettered} dead-lettered again, ${report.redrive.unchanged} left (same reason); a second run staged ${report.redrive.secondRunStaged}`,
          ),
        ]),
    ...(report.replay === undefined
      ? []
      : [
          row(
            'replay (changed transform)',
            `generation ${report.replay.generation}: offsets ${report.replay.from}..${report.replay.to} of ${report.replay.partitions} partition(s), ${report.replay.delivered} records delivered${report.replay.crashed ? ' (the replay processor crashed once and its batch came again)' : ''}; ${report.replay.switchedIn === undefined ? 'NEVER switched' : `switched by checkpoint ${report.replay.switchedIn}`}; ${report.replay.viewsChecked} reader views checked (${report.replay.viewsSwitched} after the switch): ${report.replay.violations.length === 0 ? 'old then new, never both, never neither' : `${report.replay.violations.length} wrong`}`,
          ),
        ]),
    row('throughput', `${report.recordsPerSecond} records/s (${(report.durationMs / 1000).toFixed(1)} s)`),
    row('lost / duplicated / unexpected', `${o.lost} / ${o.duplicated} / ${o.unexpected}`),
    row(
      'aggregates',
      o.aggregatesMatch ? 'equal to the deduplicated input' : 'DIFFER from the deduplicated input',
    ),
    row(
      'eos verify',
      formatVerifyResult(report.verify, 3)
        .split('\n')
        .join(`\n  ${' '.repeat(WIDTH)}`),
    ),
    ...tableLines(report),
    row('verdict', verdictLine(report)),
  ];
  if (o.differences.length > 0) {
    lines.push('  first differences:', ...o.differences.slice(0, 10).map((d) => `    - ${d}`));
  }
  return `${lines.join('\n')}\n`;
}
