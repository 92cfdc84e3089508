/** What a redrive run reports: per (lane, partition) with dead letters, what it did there. */

/** What a run did for one (lane, partition) that has dead letters. */
export interface PartitionRedrive {
  /** The dead letters' lane (`<topic>` or `<topic>~<epoch>`). */
  readonly lane: string;
  readonly partition: number;
  /** The round run (absent when nothing was to do or the run waits). */
  readonly round?: number;
  /**
   * `redriven`: the round ran; `nothing`: every dead letter is redriven already or fails again for the same
   * reason; `waiting`: the previous round is not committed yet.
   */
  readonly outcome: 'redriven' | 'nothing' | 'waiting';
  /** Records sent through the processor in this run (those an earlier run of the round staged are dropped there). */
  readonly sent: number;
  /** Of those, output rows and dead letters the processor staged in this run. */
  readonly staged: { readonly output: number; readonly deadLettered: number };
  /** Records left as they are: their fate under the current transform is their latest dead letter's. */
  readonly unchanged: number;
  /** Dead-letter rows of the lane redrive could not read (not a record's dead letter): never sent, reported. */
  readonly unreadable: number;
}

export interface RedriveResult {
  readonly partitions: readonly PartitionRedrive[];
}
