/**
 * The pipeline as an installable package. The test builds it (`npm run build`, into a temporary folder, or a copy
 * of the same build from test/support/cache-package.ts when no input of the build changed),
 * packs it (`npm pack`), installs the tarball with `--omit=dev` into a scratch CDK app outside the repository, and
 * there:
 * - type-checks and compiles the app, written as a user writes it (`new ExactlyOncePipeline(…)` from the package,
 *   a transform with `defineTransform` from `msk-exactly-once-pipeline/transform`), against the shipped
 *   declarations, with the user's own TypeScript settings (strict, NodeNext, no `skipLibCheck`);
 * - runs it with plain Node.js (no TypeScript loader) and reads the synthesized template and assets;
 * - runs the installed `eos` binary: `--help` and `verify --help` without tsx or any dev dependency.
 *
 * The install is offline: the scratch app starts from the repository's lock file (the package's dependencies are
 * the repository's, at the locked versions), so npm takes every tarball from its cache and resolves nothing.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtPackage } from '../support/cache-package.ts';

const ROOT = resolve('.');
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const DEPLOY_PAGE = readFileSync(join(ROOT, 'docs', 'deploy.md'), 'utf8');

/** A code block of docs/deploy.md: the first ```ts block after `heading`. */
function deployBlock(heading: string): string {
  const at = DEPLOY_PAGE.indexOf(heading);
  const block = at < 0 ? undefined : /```ts\n([\s\S]*?)```/.exec(DEPLOY_PAGE.slice(at))?.[1];
  if (!block) throw new Error(`docs/deploy.md has no ts block after ${heading}`);
  return block;
}

/** The user's app and transform, exactly as docs/deploy.md shows them. */
const APP_TS = deployBlock('## In your own CDK app');
const TRANSFORM_TS = deployBlock('For example `my-transforms/page-views.ts`');
/** What the docs' files name: found in the synthesized template and bundle, they prove the files were used. */
const MARKER = /name: '([^']+)'/.exec(TRANSFORM_TS)![1]!;
const TOPIC = /topic: '([^']+)'/.exec(APP_TS)![1]!;
const CLUSTER_ARN = /mskClusterArn: '([^']+)'/.exec(APP_TS)![1]!;
const STACK = /new Stack\(app, '([^']+)'/.exec(APP_TS)![1]!;

interface Manifest {
  readonly version: string;
}

const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as Manifest;

function run(command: string, args: readonly string[], cwd: string, env: NodeJS.ProcessEnv = {}): string {
  return execFileSync(command, args, {
    cwd,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, npm_config_update_notifier: 'false', npm_config_fund: 'false', ...env },
  });
}

/**
 * The scratch app's own dependencies (aws-cdk-lib and constructs, the package's peers, and @types/node, which a CDK
 * app has from `cdk init`): linked from the repository's node_modules, as npm installs a folder.
 */
const APP_DEPENDENCIES = Object.fromEntries(
  ['aws-cdk-lib', 'constructs', '@types/node'].map((name) => [
    name,
    `file:${join(ROOT, 'node_modules', name)}`,
  ]),
);

/**
 * The repository's lock file as the scratch app's, less the app's linked dependencies: every version the package
 * needs is locked there, so npm takes each tarball from its cache and fetches no metadata.
 */
function scratchLock(name: string): string {
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as {
    name: string;
    packages: Record<string, unknown>;
  };
  lock.name = name;
  lock.packages[''] = { name };
  const linked = Object.keys(APP_DEPENDENCIES);
  for (const path of Object.keys(lock.packages)) {
    if (linked.some((dep) => path === `node_modules/${dep}` || path.startsWith(`node_modules/${dep}/`))) {
      delete lock.packages[path];
    }
  }
  return JSON.stringify(lock, null, 2);
}

const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    skipLibCheck: false,
    types: ['node'],
    outDir: 'build',
  },
  files: ['app.ts', 'my-transforms/page-views.ts'],
};

interface CfnResource {
  readonly Type: string;
  readonly Properties?: Record<string, unknown>;
}

describe('the package, installed from its tarball into a CDK app outside the repository', () => {
  const work = mkdtempSync(join(tmpdir(), 'eos-package-'));
  const app = join(work, 'app');
  let tarball: string;
  let compiled: { status: number | null; output: string };
  let resources: CfnResource[];

  beforeAll(() => {
    // npm run build, into a folder of this test's own (dist/ of the repository is left alone); a build of the same
    // inputs is reused.
    const dist = join(work, 'dist');
    builtPackage(ROOT, dist, NPM);
    const packed = run(NPM, ['pack', dist, '--pack-destination', work, '--silent'], ROOT).trim().split('\n');
    tarball = join(work, packed.at(-1)!);

    mkdirSync(app);
    // A user's CDK app in TypeScript, with aws-cdk-lib and constructs of its own (the package's peer dependencies).
    writeFileSync(
      join(app, 'package.json'),
      JSON.stringify({
        name: 'scratch-cdk-app',
        private: true,
        type: 'module',
        dependencies: APP_DEPENDENCIES,
      }),
    );
    writeFileSync(join(app, 'package-lock.json'), scratchLock('scratch-cdk-app'));
    run(NPM, ['install', '--offline', '--omit=dev', '--no-audit', tarball], app);
    writeFileSync(join(app, 'app.ts'), APP_TS);
    mkdirSync(join(app, 'my-transforms'));
    writeFileSync(join(app, 'my-transforms', 'page-views.ts'), TRANSFORM_TS);
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify(TSCONFIG, null, 2));
    // The user's build: the repository's TypeScript compiler, the app's own settings and node_modules.
    const tsc = spawnSync(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: app, encoding: 'utf8' });
    compiled = { status: tsc.status, output: tsc.stdout + tsc.stderr };
  }, 900_000);
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('ships compiled JavaScript, declarations, the LICENSE, and no TypeScript sources', () => {
    const installed = join(app, 'node_modules', 'msk-exactly-once-pipeline');
    const pkg = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as Record<string, unknown>;
    expect(pkg.version).toBe(manifest.version);
    expect(pkg.license).toBe('MIT');
    expect(pkg.exports).toEqual({
      '.': { types: './infra/index.d.ts', default: './infra/index.js' },
      './transform': { types: './shared/transforms/api.d.ts', default: './shared/transforms/api.js' },
      './package.json': './package.json',
    });
    expect(pkg.devDependencies).toBeUndefined();
    expect(pkg.scripts).toBeUndefined();
    expect(readFileSync(join(installed, 'LICENSE'), 'utf8')).toContain(
      'Copyright (c) 2026 the msk-exactly-once-pipeline authors',
    );
    for (const file of ['infra/index.js', 'infra/index.d.ts', 'shared/transforms/api.d.ts', 'cli/eos.js']) {
      expect(existsSync(join(installed, file)), file).toBe(true);
    }
    const sources = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true, recursive: true })
        .filter((f) => f.isFile() && /\.[cm]?ts$/.test(f.name) && !/\.d\.[cm]?ts$/.test(f.name))
        .map((f) => join(f.parentPath, f.name));
    expect(sources(installed)).toEqual([]);
    // Declarations name the shipped .js files, not the sources (tsc leaves `.ts` specifiers in declarations).
    const index = readFileSync(join(installed, 'infra', 'index.d.ts'), 'utf8');
    expect(index).toContain("from './exactly-once-pipeline.js'");
    expect(index).not.toMatch(/from '[^']*\.ts'/);
  });

  it("type-checks and compiles the user's app and transform against the shipped declarations", () => {
    expect(compiled.output).toBe('');
    expect(compiled.status).toBe(0);
    expect(existsSync(join(app, 'build', 'app.js'))).toBe(true);
  });

  describe('synthesized by plain Node.js', () => {
    beforeAll(() => {
      // As the cdk CLI runs an app: the assembly folder and the account and region it resolves, in variables.
      run(process.execPath, [join('build', 'app.js')], app, {
        CDK_OUTDIR: 'cdk.out',
        CDK_DEFAULT_ACCOUNT: '123456789012',
        CDK_DEFAULT_REGION: 'eu-west-1',
      });
      const template = JSON.parse(readFileSync(join(app, 'cdk.out', `${STACK}.template.json`), 'utf8')) as {
        Resources: Record<string, CfnResource>;
      };
      resources = Object.values(template.Resources);
    }, 600_000);

    const ofType = (type: string): CfnResource[] => resources.filter((r) => r.Type === type);

    it("has the processor, bundled with the user's transform from the installed package", () => {
      const processor = ofType('AWS::Lambda::Function').find((f) =>
        String(f.Properties?.Description).startsWith('Stages MSK records'),
      );
      expect(processor).toBeDefined();
      const key = String((processor!.Properties!.Code as { S3Key: string }).S3Key).replace(/\.zip$/, '');
      const bundle = readFileSync(join(app, 'cdk.out', `asset.${key}`, 'index.mjs'), 'utf8');
      expect(bundle).toContain(MARKER);
      expect(bundle).toContain('createProcessorHandler');
    });

    it('has the event source mapping on the topic, the ledger table and the coordinator', () => {
      const mappings = ofType('AWS::Lambda::EventSourceMapping');
      expect(mappings).toHaveLength(1);
      expect(mappings[0]!.Properties?.Topics).toEqual([TOPIC]);
      expect(mappings[0]!.Properties?.EventSourceArn).toBe(CLUSTER_ARN);
      expect(ofType('AWS::DynamoDB::Table')).toHaveLength(1);
      // The Express workflow the schedule starts, and the Standard one it hands recoveries to.
      expect(
        ofType('AWS::StepFunctions::StateMachine')
          .map((m) => m.Properties?.StateMachineType)
          .sort(),
      ).toEqual(['EXPRESS', 'STANDARD']);
      // Every function's code is a bundle built at synth in the user's app, from the installed package.
      for (const fn of ofType('AWS::Lambda::Function')) {
        const code = fn.Properties?.Code as { S3Key?: string } | undefined;
        if (code?.S3Key === undefined) continue;
        const asset = join(app, 'cdk.out', `asset.${code.S3Key.replace(/\.zip$/, '')}`);
        expect(existsSync(asset), asset).toBe(true);
      }
    });
  });

  describe('the eos command, installed without dev dependencies', () => {
    const eos = () => join(app, 'node_modules', '.bin', 'eos');

    it('prints its help quickly, with no TypeScript loader installed', () => {
      expect(existsSync(join(app, 'node_modules', 'tsx'))).toBe(false);
      // Node's own start on this machine, for comparison: --help cannot be faster than that.
      const bareStart = performance.now();
      spawnSync(process.execPath, ['-e', ''], { cwd: app });
      const bare = performance.now() - bareStart;
      const start = performance.now();
      const help = spawnSync(eos(), ['--help'], { cwd: app, encoding: 'utf8' });
      const elapsed = performance.now() - start;
      process.stdout.write(
        `eos --help: ${elapsed.toFixed(0)} ms (node -e '': ${bare.toFixed(0)} ms) on this machine\n`,
      );
      expect(help.stderr).toBe('');
      expect(help.status).toBe(0);
      expect(help.stdout).toContain('Usage: eos');
      // The target is 0.5 s; a shared machine's load makes a tight bound flaky, hence the loose one.
      expect(elapsed).toBeLessThan(2000);
    });

    it('prints verify --help and its version', () => {
      const help = spawnSync(eos(), ['verify', '--help'], { cwd: app, encoding: 'utf8' });
      expect(help.status).toBe(0);
      expect(help.stdout).toContain('Usage: eos verify');
      const version = spawnSync(eos(), ['--version'], { cwd: app, encoding: 'utf8' });
      expect(version.stdout.trim()).toBe(manifest.version);
    });

    it('refuses eos local by name (its emulator is a dev dependency of the repository): exit 3, one line', () => {
      const local = spawnSync(eos(), ['local', '--records', '10'], { cwd: app, encoding: 'utf8' });
      expect(local.status).toBe(3);
      expect(local.stderr.trim().split('\n')).toHaveLength(1);
      expect(local.stderr).toMatch(
        /^error: [\w@/-]+ is not installed: eos local, checkpoint and deliver need the repository's development dependencies/,
      );
    });
  });
});
