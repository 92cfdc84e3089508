/**
 * Runs an `eos` command line through `main()` (what bin/eos.mjs runs) and captures what it prints, for tests of the
 * operator commands: `EOS_*` defaults cleared, so a flag the test forgets fails instead of reading the shell's.
 */
import { main } from '../../cli/eos.ts';
import type { OffsetsByTime } from '../../shared/kafka/offsets-by-time.ts';

export interface EosRun {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

export interface EosOptions {
  /** `eos replay --from-timestamp` asks this instead of brokers. */
  readonly offsetsByTime?: OffsetsByTime;
  readonly env?: NodeJS.ProcessEnv;
}

export async function eos(args: readonly string[], options: EosOptions = {}): Promise<EosRun> {
  const out: string[] = [];
  const err: string[] = [];
  const write = (text: string) => out.push(text);
  const env = {
    ...process.env,
    EOS_LEDGER_TABLE: '',
    EOS_BUCKET: '',
    EOS_PIPELINE_ID: '',
    ...options.env,
  };
  const offsets = options.offsetsByTime === undefined ? {} : { offsetsByTime: options.offsetsByTime };
  const code = await main(
    ['node', 'eos', ...args],
    { epoch: { write, env }, redrive: { write, env }, replay: { write, env, ...offsets } },
    { writeError: (text) => err.push(text), writeOut: write },
  );
  return { code, out: out.join(''), err: err.join('') };
}
