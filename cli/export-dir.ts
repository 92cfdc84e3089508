/**
 * Reading an `eos local --export DIR` folder as the commands read a bucket: `eos read` and `eos query` take
 * `--export-dir DIR` instead of `--bucket`, so a run's committed output can be looked at after its local parts are
 * gone. The folder's manifest log is checked as a bucket's is (`shared/query/sources.ts`).
 */
import { InvalidArgumentError } from 'commander';
import type { ByteSpan } from '../shared/sink/entry-bytes.ts';
import type { CommittedObjects } from '../shared/sink/reader.ts';
import type { OperatorEnvironment } from './environment.ts';

export const EXPORT_DIR_HELP = 'read an `eos local --export` directory instead of a bucket';

/** Where a read-only command reads: `--export-dir`, else `--bucket` (or `$EOS_BUCKET`); both at once is a usage error. */
export function readLocation(
  raw: { readonly bucket?: string; readonly exportDir?: string; readonly endpoint?: string },
  environment: OperatorEnvironment,
): { bucket: string } | { exportDir: string } {
  if (raw.exportDir !== undefined) {
    if (raw.bucket !== undefined)
      throw new InvalidArgumentError('--bucket and --export-dir cannot be combined');
    if (raw.endpoint !== undefined)
      throw new InvalidArgumentError('--endpoint and --export-dir cannot be combined');
    return { exportDir: raw.exportDir };
  }
  return { bucket: environment.requiredBucket(raw.bucket, '--export-dir') };
}

/** The committed objects of `pipeline` in an export folder, for `shared/sink/reader.ts`. */
export async function exportDirObjects(dir: string, pipeline: string): Promise<CommittedObjects> {
  const { exportDirectorySource } = await import('../shared/query/sources.ts');
  const source = exportDirectorySource(dir, pipeline);
  const read = async (key: string, span?: ByteSpan): Promise<Buffer | undefined> => {
    const stream = await source.open(key, span);
    if (stream === undefined) return undefined;
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  };
  // A slice of a merged object is read alone, as from a bucket by a ranged GET.
  return { manifests: () => source.manifests(), bytes: (key) => read(key), range: read };
}
