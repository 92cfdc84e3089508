/**
 * Fault injection for the local runner and the chaos tests: seeded and reproducible.
 *
 * Kinds (`--faults KIND=RATE,…`):
 * | kind                | rate is per …           | what happens                                                        |
 * |---------------------|-------------------------|---------------------------------------------------------------------|
 * | `crash`             | processor attempt       | the processor throws {@link InjectedCrashError} at one of its steps |
 * | `redeliver`         | successful invocation   | the offset commit is lost: the batch that succeeded comes again     |
 * | `zombie`            | processor attempt       | the attempt stalls at a step (timeout); the mapping's retry runs    |
 * |                     |                         | while it is stalled, then the stalled one resumes concurrently      |
 * | `throttle`          | attempt or checkpoint   | one SDK call fails with ThrottlingException / SlowDown              |
 * | `server-error`      | attempt or checkpoint   | one SDK call fails with a 5xx (InternalServerError / InternalError) |
 * | `conflict`          | attempt or checkpoint   | one TransactWriteItems is cancelled with a `TransactionConflict`    |
 * | `coordinator-crash` | checkpoint              | the coordinator throws at one of its steps                          |
 * | `poison`            | generated record        | the generator writes a record the transform rejects                 |
 *
 * Reproducibility: every decision comes from a seeded {@link Random}: an attempt's plan from a stream keyed by its
 * batch and attempt number, a checkpoint's from the sequence of checkpoints. The same seed therefore gives each
 * batch the same faults whatever order concurrent partitions finish in. Which SDK call of an attempt is "the n-th"
 * can still depend on how its partitions interleave: the plan is reproducible, the exact interleaving of I/O is not.
 *
 * Termination: an attempt that is the {@link FaultPlanner}'s `maxFaultedAttempts`-th retry of the same batch runs
 * without faults, so every rate (even 1) still lets the pipeline make progress.
 *
 * Mechanics: each processor container has an {@link AttemptSlot} holding the plan of the attempt it runs; the
 * container's processor hooks and an SDK middleware on its clients read it. The coordinator's clients have a
 * slot of their own, holding the checkpoint's plan. The runner's own reads are never faulted.
 */
import {
  type DynamoDBClient,
  InternalServerError,
  ThrottlingException,
  TransactionCanceledException,
} from '@aws-sdk/client-dynamodb';
import { type S3Client, S3ServiceException } from '@aws-sdk/client-s3';
import type { AwsClients } from '../shared/aws/clients.ts';
import { InjectedCrashError } from '../shared/errors.ts';
import { PROCESSOR_STEPS, type ProcessorStep } from '../shared/processor/processor.ts';
import { OptionError } from './errors.ts';
import type { Random } from './prng.ts';

export const FAULT_KINDS = [
  'crash',
  'redeliver',
  'zombie',
  'throttle',
  'server-error',
  'conflict',
  'coordinator-crash',
  'poison',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];
export type FaultRates = Readonly<Record<FaultKind, number>>;

export const TRANSIENT_KINDS = ['throttle', 'server-error', 'conflict'] as const;
export type TransientKind = (typeof TRANSIENT_KINDS)[number];

/** `--faults all`: every kind at a rate that exercises it often without drowning the run. */
export const DEFAULT_FAULT_RATES: FaultRates = {
  crash: 0.05,
  redeliver: 0.03,
  zombie: 0.02,
  throttle: 0.03,
  'server-error': 0.02,
  conflict: 0.02,
  'coordinator-crash': 0.2,
  poison: 0.01,
};

export const NO_FAULTS: FaultRates = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<
  FaultKind,
  number
>;

function isFaultKind(text: string): text is FaultKind {
  return (FAULT_KINDS as readonly string[]).includes(text);
}

/**
 * `all`, `none`, or a comma list of `KIND=RATE` (rates in [0, 1]); `all` may start the list to override some
 * rates: `all,crash=0.2`. Kinds not listed are off.
 */
export function parseFaultSpec(text: string, option = '--faults'): FaultRates {
  const rates: Record<FaultKind, number> = { ...NO_FAULTS };
  const parts = text
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part !== '');
  if (parts.length === 0) throw new OptionError(option, 'expected all, none or KIND=RATE,…');
  parts.forEach((part, index) => {
    if ((part === 'all' || part === 'none') && index === 0) {
      if (part === 'all') Object.assign(rates, DEFAULT_FAULT_RATES);
      return;
    }
    const match = /^([a-z-]+)=(.+)$/.exec(part);
    if (!match) throw new OptionError(option, `"${part}" is not KIND=RATE (or a leading all / none)`);
    const [, kind, rateText] = match as unknown as [string, string, string];
    if (!isFaultKind(kind)) {
      throw new OptionError(option, `unknown fault kind "${kind}" (known: ${FAULT_KINDS.join(', ')})`);
    }
    const rate = Number(rateText);
    if (!Number.isFinite(rate) || rate < 0 || rate > 1 || rateText.trim() === '') {
      throw new OptionError(option, `rate of ${kind} must be a number in [0, 1], got "${rateText}"`);
    }
    rates[kind] = rate;
  });
  return rates;
}

export function formatFaultRates(rates: FaultRates): string {
  const active = FAULT_KINDS.filter((kind) => rates[kind] > 0);
  return active.length === 0 ? 'none' : active.map((kind) => `${kind}=${rates[kind]}`).join(',');
}

/** What one processor attempt suffers. At most one attempt fault; a lost commit can come on top. */
export interface InvocationPlan {
  readonly crash?: { readonly step: ProcessorStep; readonly occurrence: number };
  readonly transient?: { readonly kind: TransientKind; readonly call: number };
  readonly zombie?: { readonly pauseAt: ProcessorStep; readonly resumeAt: ProcessorStep | 'end' };
  readonly loseCommit: boolean;
}

export const CLEAN_PLAN: InvocationPlan = { loseCommit: false };

export class FaultPlanner {
  constructor(
    readonly rates: FaultRates,
    private readonly random: Random,
    private readonly maxFaultedAttempts = 3,
  ) {}

  /**
   * The plan of one attempt at a batch (`attempt` 1 for its first delivery). Drawn from a stream keyed by the
   * batch (`batch` names its partitions and offsets) and the attempt, not from a shared sequence: concurrent
   * partitions finish in a different order on every run, but each batch meets the same faults.
   */
  planInvocation(batch: string, attempt: number, allowZombie = true): InvocationPlan {
    const r = this.random.fork(`${batch}#${attempt}${allowZombie ? '' : '#zombie-retry'}`);
    const draws = {
      crash: r.chance(this.rates.crash),
      zombie: r.chance(this.rates.zombie),
      throttle: r.chance(this.rates.throttle),
      'server-error': r.chance(this.rates['server-error']),
      conflict: r.chance(this.rates.conflict),
      redeliver: r.chance(this.rates.redeliver),
    };
    const step = r.pick(PROCESSOR_STEPS);
    const other = r.pick(PROCESSOR_STEPS);
    const occurrence = 1 + r.int(2);
    const call = 1 + r.int(4);
    const resumeAt = r.chance(0.3) ? 'end' : other;
    if (attempt > this.maxFaultedAttempts) return CLEAN_PLAN;
    const loseCommit = draws.redeliver;
    if (draws.crash) return { crash: { step, occurrence }, loseCommit };
    if (draws.zombie && allowZombie) return { zombie: { pauseAt: step, resumeAt }, loseCommit };
    for (const kind of TRANSIENT_KINDS) {
      if (draws[kind])
        return { transient: { kind, call: kind === 'conflict' ? occurrence : call }, loseCommit };
    }
    return { loseCommit };
  }

  /**
   * The transient AWS error one checkpoint's coordinator meets, if any: the n-th SDK call of the execution (the
   * n-th transaction for a conflict), mid-step as often as not, which a crash at a step's edge never is.
   */
  planCheckpointTransient(): InvocationPlan['transient'] {
    const r = this.random;
    const draws = TRANSIENT_KINDS.map((kind) => ({ kind, hit: r.chance(this.rates[kind]) }));
    const call = 1 + r.int(30);
    const transaction = 1 + r.int(3);
    const kind = draws.find((draw) => draw.hit)?.kind;
    if (!kind) return undefined;
    return { kind, call: kind === 'conflict' ? transaction : call };
  }

  /** The coordinator step to crash at in this checkpoint, if any. */
  planCheckpoint<S extends string>(steps: readonly S[]): S | undefined {
    const crash = this.random.chance(this.rates['coordinator-crash']);
    const step = this.random.pick(steps);
    return crash ? step : undefined;
  }
}

/** Faults that actually fired, by kind. */
export class FaultLog {
  private readonly counts = new Map<FaultKind, number>();

  record(kind: FaultKind, times = 1): void {
    this.counts.set(kind, (this.counts.get(kind) ?? 0) + times);
  }

  count(kind: FaultKind): number {
    return this.counts.get(kind) ?? 0;
  }

  snapshot(): Record<FaultKind, number> {
    return Object.fromEntries(FAULT_KINDS.map((kind) => [kind, this.count(kind)])) as Record<
      FaultKind,
      number
    >;
  }
}

/** One processor attempt's fault state. */
export interface AttemptContext {
  readonly plan: InvocationPlan;
  readonly steps: Map<ProcessorStep, number>;
  sdkCalls: number;
  transactCalls: number;
  /** Zombie: called when the attempt reaches its pause step; resolves when it may resume. */
  readonly stall?: () => Promise<void>;
  /** Called at every step the attempt reaches (the runner resumes a stalled zombie from here). */
  readonly onStep?: (step: ProcessorStep) => void;
}

export function attemptContext(
  plan: InvocationPlan,
  extras: Partial<Pick<AttemptContext, 'stall' | 'onStep'>> = {},
) {
  const context: AttemptContext = { plan, steps: new Map(), sdkCalls: 0, transactCalls: 0, ...extras };
  return context;
}

type Service = 'dynamodb' | 's3';

function transientError(kind: TransientKind, service: Service, command: string, input: unknown): Error {
  const $metadata = { httpStatusCode: 500, requestId: 'injected-fault', attempts: 1, totalRetryDelay: 0 };
  const message = `injected ${kind} fault on ${command}`;
  if (kind === 'conflict') {
    const items = (input as { TransactItems?: unknown[] }).TransactItems ?? [];
    return new TransactionCanceledException({
      message,
      $metadata: { ...$metadata, httpStatusCode: 400 },
      CancellationReasons: items.map((_, i) =>
        i === 0
          ? { Code: 'TransactionConflict', Message: 'Transaction is ongoing for the item' }
          : { Code: 'None' },
      ),
    });
  }
  if (service === 'dynamodb') {
    return kind === 'throttle'
      ? new ThrottlingException({ message, $metadata: { ...$metadata, httpStatusCode: 400 } })
      : new InternalServerError({ message, $metadata });
  }
  const name = kind === 'throttle' ? 'SlowDown' : 'InternalError';
  return new S3ServiceException({
    name,
    $fault: 'server',
    message,
    $metadata: { ...$metadata, httpStatusCode: kind === 'throttle' ? 503 : 500 },
  });
}

/**
 * Injects one container's faults. A container (a processor instance with its own clients) runs one attempt at a
 * time, as a Lambda container does, so the slot's current attempt is the attempt any hook call or SDK call of
 * that container belongs to. (An AsyncLocalStorage would do the same across shared clients, but it turns on
 * promise hooks for the whole process: a fifth of the chaos test's CPU went there.)
 */
export class AttemptSlot {
  private current: AttemptContext | undefined;

  constructor(private readonly log: FaultLog) {}

  /** Runs `fn` as one processor attempt under `context`. */
  async run<T>(context: AttemptContext, fn: () => Promise<T>): Promise<T> {
    if (this.current) throw new Error('a container runs one attempt at a time');
    this.current = context;
    try {
      return await fn();
    } finally {
      this.current = undefined;
    }
  }

  /** Hooks for `createProcessor`: crash or stall at the planned step. */
  readonly hooks = {
    onStep: async (step: ProcessorStep): Promise<void> => {
      const context = this.current;
      if (!context) return;
      const seen = (context.steps.get(step) ?? 0) + 1;
      context.steps.set(step, seen);
      context.onStep?.(step);
      const { crash, zombie } = context.plan;
      if (crash && crash.step === step && crash.occurrence === seen) {
        this.log.record('crash');
        throw new InjectedCrashError(`processor ${step} #${seen}`);
      }
      if (zombie && context.stall && zombie.pauseAt === step && seen === 1) {
        this.log.record('zombie');
        await context.stall();
      }
    },
  };

  /** Adds the transient-error middleware to both clients, bound to this slot. */
  instrument(clients: AwsClients): AwsClients {
    this.addMiddleware(clients.dynamodb, 'dynamodb');
    this.addMiddleware(clients.s3, 's3');
    return clients;
  }

  private addMiddleware(client: DynamoDBClient | S3Client, service: Service): void {
    const stack = client.middlewareStack as DynamoDBClient['middlewareStack'];
    stack.add(
      (next, handlerContext) => async (args) => {
        this.maybeFail(service, handlerContext.commandName ?? 'command', args.input);
        return next(args);
      },
      { step: 'initialize', name: 'eosFaultInjection', override: true },
    );
  }

  private maybeFail(service: Service, command: string, input: unknown): void {
    const context = this.current;
    const transient = context?.plan.transient;
    if (!context || !transient) return;
    const isTransaction = /TransactWrite/.test(command);
    if (isTransaction) context.transactCalls++;
    context.sdkCalls++;
    const due =
      transient.kind === 'conflict'
        ? isTransaction && context.transactCalls === transient.call
        : context.sdkCalls === transient.call;
    if (!due) return;
    this.log.record(transient.kind);
    throw transientError(transient.kind, service, command, input);
  }
}
