/**
 * What `eos verify` (`verify.ts`) finds wrong, and the rules it checks the manifests and the rows it reads against:
 * the manifest chain and cuts (1), switched replay generations (6), and each listed entry's rows — inside its range
 * and the cut, one lineage once across files and streams, offsets increasing per stream, partition and folder
 * (2–4). It reads nothing itself: `verify.ts` hands it the manifests and each entry's rows.
 */
import {
  epochLaneOf,
  generationLaneOf,
  generationOfLane,
  sourceLaneOf,
  topicOfLane,
} from '../ledger/epochs.ts';
import type { Stream } from '../ledger/layout.ts';
import { type GenerationSwitch, parseGenerationSwitch, type ReplayRange } from './generation-switch.ts';
import type { Manifest, ManifestFile } from './manifest.ts';

export const PROBLEM_KINDS = [
  'manifest-unreadable',
  'no-manifests',
  'manifest-gap',
  'manifest-chain',
  'cut-mismatch',
  'listed-twice',
  'foreign-key',
  'missing-object',
  'object-mismatch',
  'row-malformed',
  'outside-range',
  'lineage-twice',
  'offset-order',
  'unlisted-object',
  'generation-switch',
] as const;
export type ProblemKind = (typeof PROBLEM_KINDS)[number];

export interface Problem {
  readonly kind: ProblemKind;
  readonly key?: string;
  readonly message: string;
}

interface Lineage {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
}

function lineageOf(row: Record<string, unknown>): Lineage | undefined {
  const source = row.source as Partial<Lineage> | undefined;
  if (!source || typeof source.topic !== 'string') return undefined;
  if (!Number.isSafeInteger(source.partition) || !Number.isSafeInteger(source.offset)) return undefined;
  return source as Lineage;
}

export class Checker {
  readonly problems: Problem[] = [];
  /** Switched replay generations: their ranges by `<epoch lane>#<partition>` (`shared/replay/`). */
  readonly switched = new Map<number, Map<string, ReplayRange>>();
  private readonly lineages = new Map<string, string>();
  /** Output rows by the original record (`<lane>#<partition>#<offset>`, redrive rounds folded): where first seen. */
  private readonly outputLanes = new Map<string, { readonly lane: string; readonly key: string }>();
  private readonly lastOffset = new Map<string, number>();
  readonly rows: Record<Stream, number> = { output: 0, deadletter: 0 };

  problem(kind: ProblemKind, message: string, key?: string): void {
    this.problems.push(key === undefined ? { kind, message } : { kind, key, message });
  }

  /** Manifests gap-free, chained, cuts continuous and never moving back. */
  chain(manifests: readonly { id: number; manifest: Manifest }[]): void {
    let previous: Manifest | undefined;
    manifests.forEach(({ id, manifest }, index) => {
      if (id !== index + 1)
        this.problem('manifest-gap', `manifest ${index + 1} is missing (next found: ${id})`);
      if (manifest.checkpointId !== id) {
        this.problem('manifest-chain', `manifest ${id} names checkpoint ${manifest.checkpointId}`);
      }
      const expected = previous?.checkpointId ?? 0;
      if (manifest.previousCheckpointId !== expected) {
        this.problem(
          'manifest-chain',
          `manifest ${id} follows ${manifest.previousCheckpointId}, expected ${expected}`,
        );
      }
      for (const [partition, offset] of Object.entries(previous?.cut ?? {})) {
        const from = manifest.previousCut?.[partition];
        if (from !== offset) {
          this.problem(
            'cut-mismatch',
            `manifest ${id} starts ${partition} at ${from}, the previous cut ended at ${offset}`,
          );
        }
        if (manifest.cut?.[partition] === undefined) {
          this.problem('cut-mismatch', `manifest ${id} drops ${partition} from its cut`);
        }
      }
      // Every partition it starts from must be where the previous checkpoint ended (nothing before the first).
      for (const [partition, from] of Object.entries(manifest.previousCut ?? {})) {
        const ended = previous?.cut?.[partition] ?? -1;
        if (from !== ended) {
          this.problem(
            'cut-mismatch',
            `manifest ${id} starts ${partition} at ${from}, but ${previous ? 'the previous cut ended' : 'nothing was committed before'} at ${ended}`,
          );
        }
      }
      for (const [partition, offset] of Object.entries(manifest.cut ?? {})) {
        const from = manifest.previousCut?.[partition] ?? -1;
        if (offset < from)
          this.problem('cut-mismatch', `manifest ${id} moves ${partition} back from ${from} to ${offset}`);
      }
      this.switches(id, manifest);
      previous = manifest;
    });
  }

  /**
   * A manifest's replay switches: well-formed, each generation switched once, and each range covered by this
   * manifest's own cut (the generation lane committed through `to`: nothing of the range left to come).
   */
  private switches(id: number, manifest: Manifest): void {
    for (const raw of manifest.generations ?? []) {
      let change: GenerationSwitch;
      try {
        change = parseGenerationSwitch(raw);
      } catch (error) {
        this.problem('generation-switch', `manifest ${id}: ${(error as Error).message}`);
        continue;
      }
      if (this.switched.has(change.generation)) {
        this.problem('generation-switch', `manifest ${id} switches to generation ${change.generation} again`);
      }
      const ranges = new Map<string, ReplayRange>();
      for (const range of change.ranges) {
        ranges.set(`${range.lane}#${range.partition}`, range);
        const lane = `${generationLaneOf(range.lane, change.generation)}#${range.partition}`;
        const covered = manifest.cut?.[lane] ?? -1;
        if (covered < range.to) {
          this.problem(
            'generation-switch',
            `manifest ${id} switches ${range.lane}/${range.partition} ${range.from}-${range.to} to generation ${change.generation}, but its cut has ${lane} only through ${covered}`,
          );
        }
      }
      this.switched.set(change.generation, ranges);
    }
  }

  /**
   * A listed file's rows: inside its range and the cut, each lineage once, offsets increasing per stream and
   * partition — and time folder: a late record goes to its own folder, so offsets increase within each folder.
   */
  rowsOf(
    manifest: Manifest,
    file: ManifestFile,
    rows: readonly Record<string, unknown>[],
    folder = '',
  ): void {
    const partition = `${file.topic}#${file.partition}`;
    const cut = manifest.cut?.[partition];
    const from = manifest.previousCut?.[partition] ?? -1;
    if (cut === undefined || file.firstOffset <= from || file.lastOffset > cut) {
      this.problem(
        'outside-range',
        `offsets ${file.firstOffset}-${file.lastOffset} lie outside checkpoint ${manifest.checkpointId}'s cut (${from}, ${cut}]`,
        file.key,
      );
    }
    const sequence = `${file.stream}#${partition}#${folder}`;
    for (const row of rows) {
      const lineage = lineageOf(row);
      // In epoch N >= 1 the file names the lane `<topic>~<N>`; its rows name the record's topic (`epochs.ts`).
      if (!lineage || lineage.topic !== topicOfLane(file.topic) || lineage.partition !== file.partition) {
        this.problem(
          'row-malformed',
          `a row's source ${JSON.stringify(row.source)} does not name ${partition}`,
          file.key,
        );
        continue;
      }
      this.rows[file.stream]++;
      const { offset } = lineage;
      const generation = generationOfLane(file.topic);
      const ranges = this.switched.get(generation);
      const range = ranges?.get(`${epochLaneOf(file.topic)}#${file.partition}`);
      if (ranges !== undefined && (range === undefined || offset < range.from || offset > range.to)) {
        this.problem(
          'generation-switch',
          `row at offset ${offset} of generation ${generation} lies outside the ranges it was switched to`,
          file.key,
        );
      }
      if (offset < file.firstOffset || offset > file.lastOffset) {
        this.problem(
          'outside-range',
          `row at offset ${offset} outside the listed range ${file.firstOffset}-${file.lastOffset}`,
          file.key,
        );
      }
      const id = `${partition}#${offset}`;
      const first = this.lineages.get(id);
      if (first !== undefined)
        this.problem('lineage-twice', `${file.topic}/${file.partition}@${offset} also in ${first}`, file.key);
      else this.lineages.set(id, file.key);
      if (file.stream === 'output') {
        // At most one record's output across its lane and every redrive round of it (a redriven record's output
        // lies in a redrive lane, its dead letter in the lane it came from).
        const original = `${sourceLaneOf(file.topic)}#${file.partition}#${offset}`;
        const earlier = this.outputLanes.get(original);
        if (earlier === undefined) this.outputLanes.set(original, { lane: file.topic, key: file.key });
        else if (earlier.lane !== file.topic) {
          this.problem(
            'lineage-twice',
            `${original} is output in ${earlier.lane} (${earlier.key}) too`,
            file.key,
          );
        }
      }
      const last = this.lastOffset.get(sequence) ?? -1;
      if (offset <= last) {
        this.problem(
          'offset-order',
          `${file.stream} ${file.topic}/${file.partition}: offset ${offset} comes after ${last}`,
          file.key,
        );
      }
      this.lastOffset.set(sequence, Math.max(last, offset));
    }
  }
}
