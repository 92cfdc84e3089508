/**
 * Correlation ids: what ties the log lines of one unit of work together across retries.
 *
 * For the processor the unit is the batch: the mapping retries a failed batch with the same records, so an id
 * built from its partitions and offset ranges is the same on every retry (the Lambda request id is not), and a
 * search for it shows the whole history of that batch. For coordinator steps the unit is the checkpoint.
 */

interface MskLikeRecord {
  readonly offset?: unknown;
}

interface MskLikeEvent {
  readonly records?: Record<string, readonly MskLikeRecord[] | undefined>;
}

const MAX_LENGTH = 256;

/** `<topic>-<partition>@<first>-<last>,…` sorted by partition; undefined when the event has no records. */
export function mskBatchCorrelationId(event: unknown): string | undefined {
  const records = (event as MskLikeEvent | null)?.records;
  if (typeof records !== 'object' || records === null) return undefined;
  const parts: string[] = [];
  for (const name of Object.keys(records).sort()) {
    const offsets = (records[name] ?? []).map((record) => Number(record.offset)).filter(Number.isFinite);
    if (offsets.length === 0) continue;
    parts.push(`${name}@${Math.min(...offsets)}-${Math.max(...offsets)}`);
  }
  if (parts.length === 0) return undefined;
  const id = parts.join(',');
  return id.length <= MAX_LENGTH ? id : `${id.slice(0, MAX_LENGTH - 1)}…`;
}

/**
 * A correlation id read from a top-level field of the event (for example `checkpointId` in a coordinator step's
 * payload); undefined when the field is absent.
 */
export function fieldCorrelationId(...fields: string[]): (event: unknown) => string | undefined {
  return (event) => {
    if (typeof event !== 'object' || event === null) return undefined;
    for (const field of fields) {
      const value = (event as Record<string, unknown>)[field];
      if (typeof value === 'string' || typeof value === 'number') return `${field}:${value}`;
    }
    return undefined;
  };
}
