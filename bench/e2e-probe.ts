/**
 * A run's probes: the runner's observer hooks that record when it started, drained and committed, each append,
 * acknowledgement and state machine step, and count every AWS call and S3 byte of the processors and the coordinator.
 */
import type { RunObserver } from '../local/runner.ts';
import { ByteCounter, CallCounter } from '../shared/aws/call-counter.ts';
import type { CoordinatorStep } from '../shared/coordinator/definition.ts';

/** What a run's probes saw. */
export interface Probe {
  readonly observer: RunObserver;
  started: number;
  drained: number;
  readonly commits: Map<number, number>;
  /** Per partition, each offset's append time. */
  readonly appended: Map<number, number[]>;
  /** Acknowledgements: (time, records acknowledged so far). */
  readonly acks: Array<[number, number]>;
  readonly stepEvents: Array<{ step: CoordinatorStep; phase: 'before' | 'after'; at: number }>;
  readonly processor: ByteCounter;
  readonly coordinator: ByteCounter;
  /** Every AWS call by operation, the processors' and the coordinator's apart. */
  readonly calls: { readonly processor: CallCounter; readonly coordinator: CallCounter };
}

export function probe(): Probe {
  const p: Probe = {
    started: Number.NaN,
    drained: Number.NaN,
    commits: new Map(),
    appended: new Map(),
    acks: [],
    stepEvents: [],
    processor: new ByteCounter({ keepCalls: true }),
    coordinator: new ByteCounter({ keepCalls: true }),
    calls: { processor: new CallCounter(), coordinator: new CallCounter() },
    observer: {},
  };
  let acknowledged = 0;
  (p as { observer: RunObserver }).observer = {
    clients: (clients, role) => {
      if (role === 'processor') p.processor.attach(clients);
      if (role === 'coordinator') p.coordinator.attach(clients);
      if (role === 'processor') p.calls.processor.attach(clients);
      if (role === 'coordinator') p.calls.coordinator.attach(clients);
    },
    started: (at) => {
      p.started = at;
    },
    drained: (at) => {
      p.drained = at;
    },
    committed: (id, at) => {
      p.commits.set(id, at);
    },
    acknowledged: (records, at) => {
      acknowledged += records;
      p.acks.push([at, acknowledged]);
    },
    step: (step, phase, at) => {
      p.stepEvents.push({ step, phase, at });
    },
    appended: (partition, offset, at) => {
      const times = p.appended.get(partition) ?? [];
      times[offset] = at;
      p.appended.set(partition, times);
    },
  };
  return p;
}
