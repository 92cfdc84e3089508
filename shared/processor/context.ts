/**
 * What every part of the processor works with, built once per container by `Processor`: the settings, the ledger
 * (through its port), the staged writer, the transform, the clock, the host's observer and the crash hook.
 */
import type { Clock } from '../clock.ts';
import type { Settings } from '../config/settings.ts';
import type { StagedWriter } from '../sink/staged-writer.ts';
import type { Transform } from '../transforms/types.ts';
import type { ProcessorLedger } from './ledger-port.ts';
import type { ProcessorObserver, ProcessorStep, StepContext } from './observer.ts';

export interface ProcessorContext {
  readonly settings: Settings;
  readonly ledger: ProcessorLedger;
  readonly writer: StagedWriter;
  readonly transform: Transform;
  readonly clock: Clock;
  readonly observer: ProcessorObserver | undefined;
  /** Awaits the host's hook at a step (a fault schedule crashes the processor there). */
  step(step: ProcessorStep, context: StepContext): Promise<void>;
}
