/**
 * Which output generation readers show, record by record: generation 0 (the live output) everywhere,
 * except in the ranges a committed manifest switched to a replay generation (`plan.ts`), where that generation's
 * rows are shown instead; a later switch over the same offsets wins. Rows of a generation no manifest switched to
 * (a replay still staging, or one never switched) are shown nowhere.
 *
 * A row's generation is its lane's (`<epoch lane>~g<G>`, and its redrive rounds `…~g<G>~r<R>`; 0 without `~g`);
 * its position is (epoch lane, partition, offset). So for every record of a switched range exactly one
 * generation's rows are visible, before the switch the old one's and after it the new one's: the switch is the
 * manifest that names it, and manifests are read in full before any data (a reader never mixes two views).
 *
 * Free of SDK imports: the committed reader, `eos query` and `eos verify` share it.
 */
import { epochLaneOf, generationOfLane } from '../ledger/epochs.ts';
import { parseGenerationSwitch } from './generation-switch.ts';
import type { Manifest, ManifestFile } from './manifest.ts';

interface Span {
  readonly from: number;
  readonly to: number;
  readonly generation: number;
}

/** How much of a listed file readers show: all of it, none, or the rows {@link GenerationView.shows} keeps. */
export type FileVisibility = 'all' | 'none' | 'rows';

export class GenerationView {
  /** Per `<epoch lane>#<partition>`, the switched spans in switch order (later ones win). */
  private readonly spans = new Map<string, Span[]>();
  private readonly switched: number[] = [];

  /** Applies a manifest's switches (manifests in log order). */
  apply(manifest: Pick<Manifest, 'generations'>): void {
    for (const raw of manifest.generations ?? []) {
      const change = parseGenerationSwitch(raw);
      this.switched.push(change.generation);
      for (const range of change.ranges) {
        const id = `${range.lane}#${range.partition}`;
        const list = this.spans.get(id) ?? [];
        list.push({ from: range.from, to: range.to, generation: change.generation });
        this.spans.set(id, list);
      }
    }
  }

  /** The generations switched to, in switch order. */
  generations(): readonly number[] {
    return this.switched;
  }

  /** Whether any switch was applied (without one, every file is shown whole, as before replays). */
  get empty(): boolean {
    return this.switched.length === 0;
  }

  /** The generation shown at `offset` of `epochLane`'s partition. */
  generationAt(epochLane: string, partition: number, offset: number): number {
    const list = this.spans.get(`${epochLane}#${partition}`);
    if (list === undefined) return 0;
    for (let i = list.length - 1; i >= 0; i--) {
      const span = list[i]!;
      if (offset >= span.from && offset <= span.to) return span.generation;
    }
    return 0;
  }

  /** Whether the row of record `offset` in lane `lane` (and `partition`) is shown. */
  shows(lane: string, partition: number, offset: number): boolean {
    return generationOfLane(lane) === this.generationAt(epochLaneOf(lane), partition, offset);
  }

  /**
   * The offset intervals (inclusive, ascending, merged) of a listed file's range whose rows are shown: its lane's
   * generation is the one shown there (`topic` names the lane).
   */
  shownSpans(file: ListedRange): Array<readonly [number, number]> {
    const generation = generationOfLane(file.topic);
    const epochLane = epochLaneOf(file.topic);
    const list = this.spans.get(`${epochLane}#${file.partition}`) ?? [];
    // The generation shown is constant between the spans' edges: judge each piece of [first, last] once.
    const edges = new Set<number>([file.firstOffset]);
    for (const span of list) {
      if (span.from > file.firstOffset && span.from <= file.lastOffset) edges.add(span.from);
      if (span.to + 1 > file.firstOffset && span.to + 1 <= file.lastOffset) edges.add(span.to + 1);
    }
    const starts = [...edges].sort((a, b) => a - b);
    const shown: Array<[number, number]> = [];
    starts.forEach((start, i) => {
      if (this.generationAt(epochLane, file.partition, start) !== generation) return;
      const end = i + 1 < starts.length ? starts[i + 1]! - 1 : file.lastOffset;
      const last = shown.at(-1);
      if (last !== undefined && last[1] + 1 === start) last[1] = end;
      else shown.push([start, end]);
    });
    return shown;
  }

  /** How much of a listed file is shown. */
  visibility(file: ListedRange): FileVisibility {
    const shown = this.shownSpans(file);
    if (shown.length === 0) return 'none';
    const [only] = shown;
    return shown.length === 1 && only![0] === file.firstOffset && only![1] === file.lastOffset
      ? 'all'
      : 'rows';
  }
}

type ListedRange = Pick<ManifestFile, 'topic' | 'partition' | 'firstOffset' | 'lastOffset'>;

/** The offset a row's lineage names, or undefined (`source.offset`). */
export function rowOffset(row: Record<string, unknown>): number | undefined {
  const source = row.source as { offset?: unknown } | undefined;
  const offset = source?.offset;
  return typeof offset === 'number' && Number.isSafeInteger(offset) ? offset : undefined;
}
