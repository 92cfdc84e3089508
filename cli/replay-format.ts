/** What `eos replay` prints: a plan written, each replay's progress, a switch asked for. */
import type { ReplayTimes } from '../shared/replay/plan.ts';
import type { PlannedReplay, ReplayStatus } from '../shared/replay/replay.ts';
import type { RequestSwitchOutcome } from '../shared/replay/store.ts';

const iso = (ms: number) => new Date(ms).toISOString();

export function formatPlanned({ plan, skipped, existing }: PlannedReplay, pipeline: string): string {
  const lines = [
    existing
      ? `generation ${plan.generation} was planned already with these ranges (${iso(plan.createdAt)}): nothing new planned`
      : `generation ${plan.generation} planned: ${plan.ranges.length} partitions${timesText(plan.times)}`,
    ...plan.ranges.map((r) => `  ${r.lane}-${r.partition}: offsets ${r.from}..${r.to}`),
    ...skipped.map((s) => `  partition ${s.partition} skipped: ${s.reason}`),
    'next:',
    `  1. deploy the replay mapping: the pipeline's replay prop { generation: ${plan.generation} } (docs/deploy.md); on a laptop: eos deliver --generation ${plan.generation} --input <file>`,
    `  2. eos replay --pipeline ${pipeline} --switch ${plan.generation}: readers move to it once every range is committed (on a laptop: at the next eos checkpoint)`,
    `  3. after the switch, remove the replay prop and deploy again`,
  ];
  return `${lines.join('\n')}\n`;
}

function timesText(times: ReplayTimes | undefined): string {
  if (times === undefined) return '';
  return times.to === undefined
    ? `, records from ${iso(times.from)} on`
    : `, records from ${iso(times.from)} until ${iso(times.to)}`;
}

function phaseText(status: ReplayStatus): string {
  if (status.phase === 'switched') return `switched by checkpoint ${status.plan.switchedIn}`;
  if (status.phase === 'switch-requested') {
    return status.committed
      ? 'switch requested: every range is committed, the next checkpoint switches'
      : 'switch requested: waits until every range is committed';
  }
  return status.committed
    ? 'staged and committed: eos replay --switch to move readers to it'
    : 'staging: readers see the earlier generation';
}

export function formatStatus(replays: readonly ReplayStatus[]): string {
  if (replays.length === 0) return 'no replay is planned (eos replay --topic T --from-offset N plans one)\n';
  const lines: string[] = [];
  for (const status of replays) {
    lines.push(
      `generation ${status.plan.generation} (planned ${iso(status.plan.createdAt)}${timesText(status.plan.times)}): ${phaseText(status)}`,
    );
    for (const r of status.ranges) {
      const done =
        r.committedOffset >= r.to
          ? 'done'
          : `${r.to - Math.max(r.committedOffset, r.from - 1)} offsets to go`;
      lines.push(
        `  ${r.lane}-${r.partition}: offsets ${r.from}..${r.to}: staged to ${r.stagedOffset}, committed to ${r.committedOffset} (${done})`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

export function switchText(generation: number, outcome: RequestSwitchOutcome): string {
  switch (outcome) {
    case 'requested':
      return `generation ${generation}: switch requested; the first checkpoint that covers every range switches readers (eos replay shows progress)\n`;
    case 'already-requested':
      return `generation ${generation}: the switch was requested already; it waits for its ranges (eos replay shows progress)\n`;
    case 'already-switched':
      return `generation ${generation}: readers switched to it already\n`;
    case 'no-plan':
      return '';
  }
}
