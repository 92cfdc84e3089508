/**
 * `eos verify --iceberg-table <location>`: after the layout check, the pipeline's Iceberg table is checked against its
 * manifest log (`shared/coordinator/publish/table-audit.ts`). The table is a file-catalog table: its metadata under
 * `<location>/metadata/` in S3; `default` names the one `eos local --output iceberg` writes,
 * `<pipeline>/iceberg/output` in the bucket. Tables behind S3 Tables or Glue are named by deploy settings, which
 * this command does not read: it says so in one line.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { InvalidArgumentError } from 'commander';
import type { TableAudit } from '../shared/coordinator/publish/table-audit.ts';

export const TABLE_HELP =
  'also check the Iceberg table at this S3 location (s3://<bucket>/<table root>, a file-catalog table) against the manifest log; default: the table eos local --output iceberg writes, <pipeline>/iceberg/output in the bucket';

/** Where a file-catalog table is: its bucket and key prefix (no trailing slash). */
export interface TableRoot {
  readonly bucket: string;
  readonly root: string;
}

/**
 * The table `--iceberg-table` names: checked before any call, `default` resolved once the bucket and pipeline are known.
 * Anything but an S3 location (a Glue or S3 Tables name, an ARN) is refused.
 */
export function parseTableOption(value: string): TableRoot | 'default' {
  if (value === 'default') return 'default';
  const match = /^s3:\/\/([^/]+)\/(.*[^/])\/*$/.exec(value);
  if (!match) {
    throw new InvalidArgumentError(
      `--iceberg-table ${value}: --iceberg-table takes an S3 location of a file-catalog table (s3://<bucket>/<table root>) or default; tables in S3 Tables or Glue are not checked by eos verify`,
    );
  }
  return { bucket: match[1] as string, root: match[2] as string };
}

export interface TableAuditRequest {
  readonly table: TableRoot | 'default';
  readonly s3: S3Client;
  /** The bucket of the pipeline's final objects and manifests. */
  readonly bucket: string;
  readonly pipeline: string;
}

/** Loads the table and audits it against the pipeline's manifest log. */
export async function runTableAudit(request: TableAuditRequest): Promise<TableAudit> {
  const [{ auditTable }, { FileCatalog }, { ManifestStore }, { runTableRoot }] = await Promise.all([
    import('../shared/coordinator/publish/table-audit.ts'),
    import('../shared/iceberg/file-catalog.ts'),
    import('../shared/sink/manifest-store.ts'),
    import('../local/table-check.ts'),
  ]);
  const { s3, bucket, pipeline } = request;
  const table = request.table === 'default' ? { bucket, root: runTableRoot(pipeline) } : request.table;
  const catalog = new FileCatalog(s3, table.bucket, table.root);
  return auditTable({
    pipelineId: pipeline,
    bucket,
    s3,
    manifests: new ManifestStore(s3, bucket, pipeline),
    catalog,
    location: catalog.location,
  });
}

/** A readable report: a summary line, each violation (capped, the rest counted), then what was not checked. */
export function formatTableAudit(audit: TableAudit, maxViolations = 200): string {
  const summary = `published-checkpoint ${audit.publishedCheckpoint} of ${audit.checkpoints} committed checkpoints, ${audit.snapshots} snapshots of the pipeline, ${audit.committedFiles} committed data files, ${audit.liveFiles} live data files under final/`;
  const lines = audit.ok
    ? [
        `TABLE OK: ${audit.location}: ${summary}; each committed data file live once, each snapshot its checkpoint's, in order`,
      ]
    : [
        `TABLE FAILED: ${audit.violations.length} violation(s) in ${audit.location}; ${summary}`,
        ...audit.violations.slice(0, maxViolations).map((violation) => `  - ${violation}`),
        ...(audit.violations.length > maxViolations
          ? [`  … and ${audit.violations.length - maxViolations} more`]
          : []),
      ];
  return [...lines, ...audit.notes.map((note) => `  note: ${note}`)].join('\n');
}
