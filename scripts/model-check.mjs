#!/usr/bin/env node
/**
 * Model-checks the commit protocol (model/protocol.pml) and publishing to an Iceberg table (model/publish.pml)
 * with SPIN, then proves the models have teeth: every mutation of model/mutations.txt (one weakened guard each)
 * must give a counterexample in a scenario of its model. The guards listed in model/survivors.txt are run too and
 * reported apart (docs/model-checking.md says why each survives). `--known` also runs the scenarios in which the
 * code as it is has a documented counterexample (KNOWN_COUNTEREXAMPLES), and reports whether each still has one.
 *
 * Usage: node scripts/model-check.mjs [--base-only] [--known] [--jobs N] [--no-cache]
 * Needs `spin` and a C compiler (`cc`); exits 1 if the model fails, a mutation survives, or a tool is missing.
 *
 * Compiled verifiers are kept in node_modules/.cache/model-check, each under the SHA-256 of the C sources spin
 * generated, the cc command line and `cc --version`: a changed model, mutation, bound or compiler is a new key,
 * so a stale verifier is never run. Every search itself runs each time; `--no-cache` compiles everything afresh.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
} from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const models = {
  protocol: join(root, 'model', 'protocol.pml'),
  publish: join(root, 'model', 'publish.pml'),
};
const cacheDir = join(root, 'node_modules', '.cache', 'model-check');
let useCache = true;

/**
 * The bounds, as scenarios: each is checked exhaustively. One scenario with every fault at once does not fit
 * the time budget (tens of millions of states), so each concentrates the faults on one side of the protocol.
 * The protocol's prepare plans merged final objects (finalObjects: merged, the code's default) unless a scenario
 * says otherwise: -DPARTITION_OBJECTS plans one object per partition range, -DFINAL_OBJECTS_SWITCH either, per run.
 */
export const SCENARIOS = [
  {
    name: 'staging',
    large: true,
    model: 'protocol',
    what: '2 partitions x 2 records, a zombie instance on partition 0, 1 processor crash or redelivery anywhere, claims ahead, 1 claim TTL expiry, key K in both partitions; then fault-free checkpoints',
    flags: ['-DZOMBIES=1', '-DPFAULTS=1', '-DEXECUTIONS=0', '-DCFAULTS=0', '-DLAPSES=0', '-DEXPIRIES=1'],
  },
  {
    name: 'staging-in-transaction',
    model: 'protocol',
    what: 'as staging, with claims in the staging transaction (claimWrite in-transaction)',
    flags: [
      '-DZOMBIES=1',
      '-DPFAULTS=1',
      '-DEXECUTIONS=0',
      '-DCFAULTS=0',
      '-DLAPSES=0',
      '-DEXPIRIES=1',
      '-DCLAIMS_IN_TRANSACTION',
    ],
  },
  {
    name: 'checkpoint-faults',
    model: 'protocol',
    what: '1 coordinator execution with 1 step failure anywhere (retry, crash, or catch to abort) while both partitions stage; each run of prepare plans merged or per-partition final objects (finalObjects changed by a redeploy, or a shard falling back); then fault-free checkpoints',
    flags: [
      '-DSTAGERS',
      '-DZOMBIES=0',
      '-DPFAULTS=0',
      '-DEXECUTIONS=1',
      '-DCFAULTS=1',
      '-DLAPSES=0',
      '-DEXPIRIES=0',
      '-DFINAL_OBJECTS_SWITCH',
    ],
  },
  {
    name: 'claim-write-switch',
    large: true,
    model: 'protocol',
    what: 'as staging without TTL expiry, each invocation (retry, redelivery, zombie) running with either claimWrite setting (a redeploy that changes it while batches are in flight)',
    flags: [
      '-DZOMBIES=1',
      '-DPFAULTS=1',
      '-DEXECUTIONS=0',
      '-DCFAULTS=0',
      '-DLAPSES=0',
      '-DEXPIRIES=0',
      '-DCLAIM_WRITE_SWITCH',
    ],
  },
  {
    name: 'recovery-race',
    model: 'protocol',
    what: 'both partitions staged up front; 3 coordinator executions started together, 1 lease lapse while its owner runs (two recoverers can race); then fault-free checkpoints',
    flags: [
      '-DPRESTAGED',
      '-DZOMBIES=0',
      '-DPFAULTS=0',
      '-DEXECUTIONS=3',
      '-DCFAULTS=0',
      '-DLAPSES=1',
      '-DEXPIRIES=0',
    ],
  },
  {
    name: 'checkpoint-race',
    large: true,
    model: 'protocol',
    what: '2 coordinator executions started together, 1 lease lapse while its owner runs, while both partitions stage; then fault-free checkpoints',
    flags: [
      '-DSTAGERS',
      '-DZOMBIES=0',
      '-DPFAULTS=0',
      '-DEXECUTIONS=2',
      '-DCFAULTS=0',
      '-DLAPSES=1',
      '-DEXPIRIES=0',
    ],
  },
  {
    name: 'express-hand-off',
    model: 'protocol',
    what: 'both partitions staged up front; 2 Express executions started together (begin hands off an expired checkpoint and the attempt after an abort; a hand-off starts a fresh Standard execution), 1 step failure anywhere (the start of the Standard one included), 1 lease lapse; then fault-free Express checkpoints',
    flags: [
      '-DPRESTAGED',
      '-DZOMBIES=0',
      '-DPFAULTS=0',
      '-DEXECUTIONS=2',
      '-DCFAULTS=1',
      '-DLAPSES=1',
      '-DEXPIRIES=0',
      '-DEXPRESS',
    ],
  },
  {
    name: 'express-twins',
    large: true,
    model: 'protocol',
    what: 'both partitions staged up front; one Express execution run twice at once (two processes, one execution id: resume, prepare, vote, decide, abort of the same attempt; a refused vote and a lost transition read again), with the Standard executions its hand-offs start; 1 step failure anywhere, 1 lease lapse; each run of prepare plans merged or per-partition final objects; then fault-free Express checkpoints',
    flags: [
      '-DPRESTAGED',
      '-DZOMBIES=0',
      '-DPFAULTS=0',
      '-DEXECUTIONS=1',
      '-DCFAULTS=1',
      '-DLAPSES=1',
      '-DEXPIRIES=0',
      '-DTWIN_EXECUTIONS',
      '-DFINAL_OBJECTS_SWITCH',
    ],
  },
  {
    name: 'express-long',
    model: 'protocol',
    what: 'both partitions stage concurrently; 1 Express execution, 1 step failure anywhere, 1 lease lapse; a committed checkpoint may have taken longer than LONG_CHECKPOINT_MS, and the Express begin after it hands the next checkpoint off; then fault-free Express checkpoints',
    flags: [
      '-DSTAGERS',
      '-DZOMBIES=0',
      '-DPFAULTS=0',
      '-DEXECUTIONS=1',
      '-DCFAULTS=1',
      '-DLAPSES=1',
      '-DEXPIRIES=0',
      '-DEXPRESS',
      '-DLONG_CHECKPOINTS',
    ],
  },
  {
    name: 'publish-crashes',
    model: 'publish',
    what: 'publish: checkpoints 1, 2 committed in order, their publish steps concurrent; 2 crashes (before the swap, after it before the record, after the record before the mark; retried or into Cleanup); 1 compaction and 1 expiry at any time; then an idle execution',
    flags: ['-DZOMBIES=0', '-DCFAULTS=2'],
  },
  {
    name: 'publish-zombie',
    large: true,
    model: 'publish',
    what: "publish: as publish-crashes without crashes, checkpoint 2's publish step invoked twice at once (a zombie)",
    flags: ['-DZOMBIES=1', '-DCFAULTS=0'],
  },
  {
    name: 'publish-zombie-evidence-lost',
    large: true,
    model: 'publish',
    what: "publish: checkpoint 1's publish step invoked twice at once (a zombie) while 2 is published; 1 compaction, 2 expiries and another writer's commit that drops the table's properties, at any time; no crash",
    flags: ['-DZOMBIES=1', '-DZOMBIE_OF=1', '-DCFAULTS=0', '-DEXPIRIES=2', '-DPROPERTY_LOSSES=1'],
  },
  {
    name: 'publish-ledger-reset',
    model: 'publish',
    what: 'publish: the table outlived an old ledger of the same pipeline id (main at its snapshot of checkpoint 1, the property naming 1 beside the old incarnation); 1 crash, 1 compaction, 1 expiry',
    flags: ['-DZOMBIES=0', '-DCFAULTS=1', '-DOLD_LEDGER=1'],
  },
  {
    name: 'publish-rollback',
    model: 'publish',
    what: 'publish: 1 crash, 1 expiry, and an operator who once sets main back to an ancestor or restores an older metadata file, at any time; no compaction',
    flags: ['-DZOMBIES=0', '-DCFAULTS=1', '-DCOMPACTIONS=0', '-DROLLBACKS=1'],
  },
  {
    name: 'publish-rollback-settled',
    model: 'publish',
    what: "publish: the table starts at another writer's snapshot; 2 expiries; the operator rolls back once while no publish step runs; no crash, no compaction",
    flags: [
      '-DZOMBIES=0',
      '-DCFAULTS=0',
      '-DCOMPACTIONS=0',
      '-DEXPIRIES=2',
      '-DROLLBACKS=1',
      '-DINITIAL=1',
      '-DROLLBACK_BETWEEN_PUBLISHES',
    ],
  },
  {
    name: 'publish-properties-lost',
    model: 'publish',
    what: "publish: 1 crash, 1 compaction, and another writer's commit that drops the table's properties; no expiry",
    flags: ['-DZOMBIES=0', '-DCFAULTS=1', '-DEXPIRIES=0', '-DPROPERTY_LOSSES=1'],
  },
  {
    name: 'publish-rollback-during-publish',
    model: 'publish',
    what: "publish: a table starting at another writer's snapshot, rolled back once by an operator at any time, a publish step running included; no crash, no compaction",
    flags: ['-DZOMBIES=0', '-DCFAULTS=0', '-DCOMPACTIONS=0', '-DROLLBACKS=1', '-DINITIAL=1'],
  },
  {
    name: 'publish-rollback-mark-lag',
    model: 'publish',
    what: "publish: a table starting at another writer's snapshot; 1 crash (between the record and the mark among them); the operator rolls back once while no publish step runs; no compaction",
    flags: [
      '-DZOMBIES=0',
      '-DCFAULTS=1',
      '-DCOMPACTIONS=0',
      '-DROLLBACKS=1',
      '-DINITIAL=1',
      '-DROLLBACK_BETWEEN_PUBLISHES',
    ],
  },
  {
    name: 'publish-rollback-compaction',
    model: 'publish',
    what: 'publish: 1 crash, 1 compaction, 1 expiry, and the operator rolls back once while no publish step runs (main set back, a compaction on it, a snapshot expired)',
    flags: ['-DZOMBIES=0', '-DCFAULTS=1', '-DROLLBACKS=1', '-DROLLBACK_BETWEEN_PUBLISHES'],
  },
  {
    name: 'publish-rollback-below-first',
    large: true,
    model: 'publish',
    what: "publish: the table starts at another writer's snapshot; 1 crash, 1 compaction, 1 expiry; the operator sets main back once (below checkpoint 1 too) while no publish step runs",
    flags: [
      '-DZOMBIES=0',
      '-DCFAULTS=1',
      '-DINITIAL=1',
      '-DROLLBACKS=1',
      '-DROLLBACK_BETWEEN_PUBLISHES',
      '-DROLLBACK_SET_MAIN_ONLY',
    ],
  },
];

/**
 * Scenarios in which the code as it is has a counterexample (docs/model-checking.md, "What the model found"):
 * run only with `--known`, each expected to find one until the code changes.
 */
export const KNOWN_COUNTEREXAMPLES = [
  {
    name: 'publish-zombie-evidence-erased',
    model: 'publish',
    what: "publish: checkpoint 2's publish step invoked twice at once; between the live swap and its ledger record, two compactions on top, 2's snapshot and the first compaction expired and the properties dropped: the zombie finds no evidence and no record, and appends 2 again",
    flags: ['-DZOMBIES=1', '-DCFAULTS=0', '-DCOMPACTIONS=2', '-DEXPIRIES=2', '-DPROPERTY_LOSSES=1'],
  },
];

/**
 * One line per mutation: MACRO | guard | code. MACRO may join several macros with `+`: a mutation that weakens
 * two guards together, for guards that cover the same hazard (each survives alone; the pair must not), or, where
 * its line says so, a caught mutation with the guard that stops it weakened too, to show what that guard stops.
 */
function readMutations(file) {
  return readFileSync(join(root, 'model', file), 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const [macro, guard, code, scenario] = line.split('|').map((part) => part.trim());
      const defines = macro.split('+').map((name) => `-D${name.trim()}`);
      return { macro, guard, code, scenario: scenario || undefined, defines };
    });
}

function requireTool(command, args, install) {
  const probe = spawnSync(command, args, { encoding: 'utf8' });
  if (probe.error || probe.status === null) {
    console.error(`model-check: '${command}' not found. Install it first: ${install}`);
    process.exit(1);
  }
}

function run(command, args, cwd) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd });
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
    });
    child.stderr.on('data', (chunk) => {
      out += chunk;
    });
    child.on('close', (status) => resolve({ status, out }));
  });
}

/** The compiler's identity, part of every cache key: another cc or version compiles afresh. */
let compilerIdentity;
function compilerId() {
  compilerIdentity ??= spawnSync('cc', ['--version'], { encoding: 'utf8' }).stdout;
  return compilerIdentity;
}

/**
 * Compiles pan in `dir` (spin's sources there) or takes the verifier compiled from the same sources, flags and
 * compiler before. Returns the verifier's path.
 */
async function compilePan(dir, args) {
  const hash = createHash('sha256');
  hash.update(`${compilerId()}\0${args.join(' ')}\0`);
  for (const name of readdirSync(dir).sort()) hash.update(`${name}\0`).update(readFileSync(join(dir, name)));
  const cached = join(cacheDir, `pan-${hash.digest('hex')}`);
  if (useCache && existsSync(cached)) return cached;
  const cc = await run('cc', [...args, '-o', 'pan', 'pan.c'], dir);
  if (cc.status !== 0) throw new Error(`cc failed:\n${cc.out}`);
  if (!useCache) return join(dir, 'pan');
  // Copied under a temporary name then renamed: two runs at once never see half a binary.
  mkdirSync(cacheDir, { recursive: true });
  const partial = `${cached}.${process.pid}.${Math.random().toString(36).slice(2)}`;
  copyFileSync(join(dir, 'pan'), partial);
  renameSync(partial, cached);
  return cached;
}

/**
 * Compiles and runs one verification; returns its outcome as parsed from pan's report. `optimize` is cc's -O
 * level. Compiling pan.c costs about 1.5 s at -O1 against 0.4 s at -O0, while pan runs about 1.5 times as long
 * at -O0: -O1 pays only for a search of more than about 2 s. So the scenarios marked `large` (searches of
 * seconds: checkpoint-race 6.7 s of pan at -O1, 9.3 s at -O0) are compiled at -O1, the others and every mutation
 * (its search stops at its first counterexample, usually within a second) at -O0.
 */
async function verify(scenario, extra, optimize = scenario.large ? '-O1' : '-O0') {
  const dir = mkdtempSync(join(tmpdir(), 'model-check-'));
  try {
    const flags = [...scenario.flags, ...extra];
    const spin = await run('spin', ['-a', ...flags, models[scenario.model]], dir);
    if (spin.status !== 0) throw new Error(`spin -a failed:\n${spin.out}`);
    const pan = await compilePan(dir, [optimize, '-w', '-DSAFETY', '-DCOLLAPSE', '-DMEMLIM=2048']);
    const started = Date.now();
    // `times` (POSIX sh) prints the CPU time of the shell's children last: pan's own, whatever the load.
    const search = await run('sh', ['-c', '"$0" -m400000 -c1; times', pan], dir);
    const seconds = (Date.now() - started) / 1000;
    const [, minutes, secs] = /(\d+)m([\d.]+)s\s+\d+m[\d.]+s\s*$/.exec(search.out) ?? [];
    const cpu = Number(minutes ?? 0) * 60 + Number(secs ?? 0);
    const errors = Number(/errors: (\d+)/.exec(search.out)?.[1] ?? Number.NaN);
    const states = Number(/(\d+) states, stored/.exec(search.out)?.[1] ?? Number.NaN);
    const depth = Number(/depth reached (\d+)/.exec(search.out)?.[1] ?? Number.NaN);
    const violation = /pan:1: (.*)/.exec(search.out)?.[1];
    const incomplete = /max search depth too small|out of memory|Search not completed/.test(search.out);
    if (Number.isNaN(errors)) throw new Error(`pan gave no verdict:\n${search.out}`);
    return { errors, states, depth, violation, incomplete, seconds, cpu };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function pool(items, jobs, work) {
  const results = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(jobs, items.length) }, async () => {
      while (next < items.length) {
        const index = next++;
        results[index] = await work(items[index]);
      }
    }),
  );
  return results;
}

/**
 * A mutation is caught when some scenario finds a counterexample. The scenario named in its line (the one that
 * caught it last) is tried first, so a run compiles each mutation once; the others follow only if it survives
 * there.
 */
async function tryMutation(mutation) {
  const hinted = SCENARIOS.filter((scenario) => scenario.name === mutation.scenario);
  // A mutation's macros exist in one model: the hinted scenario's (protocol's when none is named).
  const model = hinted[0]?.model ?? 'protocol';
  const others = SCENARIOS.filter((s) => s.name !== mutation.scenario && s.model === model);
  for (const scenario of [...hinted, ...others]) {
    const outcome = await verify(scenario, mutation.defines, '-O0');
    panSeconds += outcome.cpu;
    if (outcome.errors > 0) {
      console.log(
        `  … ${mutation.macro}: counterexample in ${scenario.name} (${outcome.violation ?? 'error'})`,
      );
      return { ...mutation, caught: true, scenario: scenario.name, ...outcome };
    }
  }
  console.log(`  … ${mutation.macro}: no counterexample in any scenario`);
  return { ...mutation, caught: false };
}

/** pan's CPU time (user), summed over every verification (wall time is higher on a loaded machine). */
let panSeconds = 0;

async function main() {
  const argv = process.argv.slice(2);
  const baseOnly = argv.includes('--base-only');
  // Survivors are documented as surviving; re-checking them costs a search in every scenario each, so only on ask.
  const checkSurvivors = argv.includes('--survivors');
  const checkKnown = argv.includes('--known');
  useCache = !argv.includes('--no-cache');
  const jobsAt = argv.indexOf('--jobs');
  const jobs = jobsAt >= 0 ? Number(argv[jobsAt + 1]) : Math.max(1, Math.min(2, cpus().length));
  requireTool('spin', ['-V'], 'apt-get install -y spin (Debian package; .ci/run does this)');
  requireTool('cc', ['--version'], 'apt-get install -y gcc');
  const started = Date.now();
  let failed = false;

  console.log(
    'model-check: model/protocol.pml and model/publish.pml, exhaustive within these bounds (SPIN safety run, -DCOLLAPSE)',
  );
  const base = await pool(SCENARIOS, jobs, (scenario) => verify(scenario, []));
  let total = 0;
  SCENARIOS.forEach((scenario, i) => {
    const outcome = base[i];
    total += outcome.states;
    panSeconds += outcome.cpu;
    const verdict = outcome.errors === 0 && !outcome.incomplete ? 'ok' : 'FAILED';
    if (verdict !== 'ok') failed = true;
    console.log(
      `  ${verdict} ${scenario.model}.pml ${scenario.name}: ${outcome.states} states explored, depth ${outcome.depth}, ${outcome.seconds.toFixed(1)} s`,
    );
    console.log(`     bounds: ${scenario.what}`);
    if (outcome.violation) console.log(`     violation: ${outcome.violation}`);
    if (outcome.incomplete) console.log('     the search did not complete');
  });
  console.log(`model-check: ${total} states explored in all`);
  if (checkKnown && KNOWN_COUNTEREXAMPLES.length === 0) {
    console.log('model-check: no known counterexamples to reproduce');
  }
  if (checkKnown) {
    const known = await pool(KNOWN_COUNTEREXAMPLES, jobs, (scenario) => verify(scenario, []));
    KNOWN_COUNTEREXAMPLES.forEach((scenario, i) => {
      const outcome = known[i];
      panSeconds += outcome.cpu;
      const found =
        outcome.errors > 0
          ? `counterexample as documented (${outcome.violation ?? 'error'})`
          : 'NO counterexample now (the code changed: move it to SCENARIOS)';
      console.log(`  known ${scenario.name}: ${found}`);
      console.log(`     bounds: ${scenario.what}`);
    });
  }

  if (!baseOnly) {
    const mutations = readMutations('mutations.txt');
    const survivors = checkSurvivors ? readMutations('survivors.txt') : [];
    const results = await pool([...mutations, ...survivors], jobs, tryMutation);
    const caught = results.slice(0, mutations.length);
    for (const result of caught) {
      const where = result.caught ? `caught in ${result.scenario}: ${result.violation}` : 'SURVIVED';
      console.log(
        `  ${result.caught ? 'caught' : 'SURVIVED'} ${result.macro} (${result.guard}; ${result.code}) ${result.caught ? `— ${where}` : ''}`,
      );
    }
    const count = caught.filter((result) => result.caught).length;
    console.log(`model-check: ${mutations.length} mutations, ${count} caught`);
    if (count !== mutations.length) failed = true;
    if (!checkSurvivors) {
      console.log(
        `model-check: ${readMutations('survivors.txt').length} documented survivors not re-checked (--survivors re-checks them)`,
      );
    }
    for (const result of results.slice(mutations.length)) {
      console.log(
        `  ${result.caught ? `now caught in ${result.scenario} (move it to mutations.txt)` : 'survives as documented'}: ${result.macro} (${result.guard}; ${result.code})`,
      );
    }
  }
  console.log(
    `model-check: ${((Date.now() - started) / 1000).toFixed(1)} s wall, ${panSeconds.toFixed(1)} s of pan CPU; ${failed ? 'FAILED' : 'passed'}`,
  );
  process.exit(failed ? 1 : 0);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
