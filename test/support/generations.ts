/**
 * Replay generations as the replay tests see them: an `orders` transform whose rows say which generation wrote
 * them, the operator's plan and switch, and what readers show (`p@offset` → the tags of its rows). Against the
 * resources of `freshResources`.
 */
import { expect } from 'vitest';
import { systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import type { Stream } from '../../shared/ledger/layout.ts';
import { planReplay, requestSwitch } from '../../shared/replay/replay.ts';
import type { Manifest } from '../../shared/sink/manifest.ts';
import { readCommitted, readManifests } from '../../shared/sink/reader.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import type { TestResources } from './aws.ts';

const orders = builtinTransform('orders');

/**
 * `orders` whose rows say which generation wrote them (`customerId` = tag, a string column, so Parquet keeps it);
 * `reject` dead-letters the offsets it names with a reason naming the tag.
 */
export function tagged(tag: string, reject?: (offset: number) => boolean): Transform {
  return {
    name: `orders-${tag}`,
    apply(record: DecodedRecord) {
      if (reject?.(record.offset)) return { kind: 'poison', error: `${tag} rejects ${record.offset}` };
      const result = orders.apply(record);
      if (result.kind !== 'ok') return result;
      return { ...result, rows: result.rows.map((row) => ({ ...row, customerId: tag })) };
    },
  };
}

/** The live transform's rows keep `cust-…`: shown as `v1`. */
export function tagOf(row: Record<string, unknown>): string {
  const id = String(row.customerId);
  return id.startsWith('cust-') ? 'v1' : id;
}

/** A dead letter's tag: the tag its reason names, else `v1` (the live transform's). */
export function deadTag(row: Record<string, unknown>): string {
  const match = /^(\w+) rejects/.exec(String(row.error));
  return match ? `${match[1]}-dl` : 'v1-dl';
}

/** The ledger and clients the replay operations act on. */
export const replayTarget = (res: TestResources, settings: Settings) => ({
  clients: res.clients,
  table: settings.ledgerTable,
  pipeline: settings.pipelineId,
});

/** `eos replay --from-offset` (and `--to-offset`, `--partitions`) on `orders`: the plan it writes. */
export async function plan(
  res: TestResources,
  settings: Settings,
  fromOffset: number,
  toOffset?: number,
  partitions?: number[],
) {
  const planned = await planReplay({
    ...replayTarget(res, settings),
    topic: 'orders',
    fromOffset,
    ...(toOffset === undefined ? {} : { toOffset }),
    ...(partitions === undefined ? {} : { partitions }),
    clock: systemClock,
  });
  return planned.plan;
}

/** `eos replay --switch`: the next checkpoint switches readers to `generation`. */
export async function switchTo(res: TestResources, settings: Settings, generation: number): Promise<void> {
  expect(await requestSwitch(replayTarget(res, settings), generation, systemClock)).toBe('requested');
}

/** What readCommitted shows: `p@offset` → the tags of its rows joined by `+` (so two row-sets read `v1+g1`). */
export async function readerView(
  res: TestResources,
  settings: Settings,
  stream: Stream = 'output',
): Promise<Record<string, string>> {
  const view: Record<string, string> = {};
  for await (const { row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
    stream,
  })) {
    const source = row.source as { partition: number; offset: number };
    const id = `${source.partition}@${source.offset}`;
    const tag = stream === 'output' ? tagOf(row) : deadTag(row);
    view[id] = view[id] === undefined ? tag : `${view[id]}+${tag}`;
  }
  return view;
}

/** `p@o` → tag for offsets [0, count) of each partition, the tag chosen per offset. */
export function expected(
  partitions: readonly number[],
  count: number,
  tag: (partition: number, offset: number) => string | undefined,
): Record<string, string> {
  const view: Record<string, string> = {};
  for (const p of partitions) {
    for (let o = 0; o < count; o++) {
      const t = tag(p, o);
      if (t !== undefined) view[`${p}@${o}`] = t;
    }
  }
  return view;
}

/** Every committed manifest, in order. */
export async function manifests(res: TestResources, settings: Settings): Promise<Manifest[]> {
  const all: Manifest[] = [];
  for await (const m of readManifests({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  }))
    all.push(m);
  return all;
}

/** `eos verify` finds no problem. */
export async function expectVerified(res: TestResources, settings: Settings): Promise<void> {
  const result = await verifySink({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  });
  expect(result.problems).toEqual([]);
}

/** Whether an offset lies in [from, to]. */
export const inRange = (from: number, to: number) => (o: number) => o >= from && o <= to;
