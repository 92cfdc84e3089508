/**
 * The layers of the code, enforced by test/architecture/layers.test.ts (`npx depcruise --config
 * .dependency-cruiser.cjs shared functions cli infra local` prints the same verdict). Each layer imports only
 * itself and the layers below it (docs/architecture.md, "Layers"):
 *   base          shared/errors.ts, shared/clock.ts, shared/concurrency.ts, shared/aws/
 *   record model  shared/kafka/, shared/decode/, shared/transforms/
 *   settings      shared/config/ (validates topics and columns by the record model's rules)
 *   storage       shared/ledger/ (DynamoDB), shared/sink/ (S3 and output formats), shared/iceberg/ (table metadata)
 *   use cases     shared/{processor,coordinator,replay,redrive,query,status,observability}/
 *   entry points  functions/, cli/, infra/, local/
 * Type-only imports count: a layer that needs a higher layer's type has its seam in the wrong place. The ledger
 * never imports the sink, and no import cycle is allowed anywhere. (That Lambda handlers live only in functions/ is
 * checked by the test itself, not by a rule here.)
 */
const BASE = '^shared/(errors|clock|concurrency)\\.ts$|^shared/aws/';
const RECORD_MODEL = '^shared/(kafka|decode|transforms)/';
const SETTINGS = '^shared/config/';
const STORAGE = '^shared/(ledger|sink|iceberg)/';
const USE_CASES = '^shared/(processor|coordinator|replay|redrive|query|status|observability)/';
const ENTRY_POINTS = '^(functions|cli|infra|local)/';

/** A rule forbidding `from` to import any of `above`. */
function below(name, from, above, comment) {
  return { name, comment, severity: 'error', from: { path: from }, to: { path: above.join('|') } };
}

module.exports = {
  forbidden: [
    below(
      'base-imports-upward',
      BASE,
      [RECORD_MODEL, SETTINGS, STORAGE, USE_CASES, ENTRY_POINTS],
      'the base layer imports nothing above it',
    ),
    below(
      'record-model-imports-upward',
      RECORD_MODEL,
      [SETTINGS, STORAGE, USE_CASES, ENTRY_POINTS],
      'records, decoders and transforms know no settings, storage or use case',
    ),
    below(
      'settings-import-upward',
      SETTINGS,
      [STORAGE, USE_CASES, ENTRY_POINTS],
      'settings import no storage module',
    ),
    below(
      'storage-imports-upward',
      STORAGE,
      [USE_CASES, ENTRY_POINTS],
      'the ledger and the sink serve the use cases, never call them',
    ),
    below(
      'use-case-imports-entry-point',
      USE_CASES,
      [ENTRY_POINTS],
      'use cases are called by the entry points',
    ),
    below(
      'ledger-imports-sink',
      '^shared/ledger/',
      ['^shared/(sink|iceberg)/'],
      'the ledger (DynamoDB) never depends on the S3 sink or the table format',
    ),
    {
      name: 'no-cycle',
      comment: 'an import cycle makes two modules one: merge them or move the shared part down',
      severity: 'error',
      from: { path: '^(shared|functions|cli|infra|local)/' },
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(node_modules|dist|cdk\\.out)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.mjs', '.js', '.cjs', '.json'] },
  },
};
