/**
 * When the deployed processor may keep staged entries inline (`shared/processor/inline-gate.ts`): only once the
 * checkpoint head says this release's coordinator first began a checkpoint at least the grace period ago, reading
 * the head at most every few minutes while shut and never once open. The ledger here is a stand-in for the one
 * GetItem the gate makes; test/ledger/inline-entries.adversarial.test.ts drives the real one.
 */
import { describe, expect, it } from 'vitest';
import { CoordinatorReadersGate, INLINE_GRACE_MS, RECHECK_MS } from '../../shared/processor/inline-gate.ts';

function gateOver(answers: Array<number | undefined | Error>) {
  const reads: number[] = [];
  const ledger = {
    readCompactFenceSince: async (pipeline: string) => {
      expect(pipeline).toBe('pl');
      reads.push(reads.length);
      const answer = answers[Math.min(reads.length - 1, answers.length - 1)];
      if (answer instanceof Error) throw answer;
      return answer;
    },
  };
  return { gate: new CoordinatorReadersGate(ledger, 'pl'), reads };
}

describe('the inline-entries gate of a deployed processor', () => {
  it('stays shut without a note, and reads the head again only after the recheck interval', async () => {
    const { gate, reads } = gateOver([undefined]);
    expect(await gate.allows(0)).toBe(false);
    expect(await gate.allows(RECHECK_MS - 1)).toBe(false);
    expect(reads).toHaveLength(1);
    expect(await gate.allows(RECHECK_MS)).toBe(false);
    expect(reads).toHaveLength(2);
  });

  it('opens once the note is the grace period old, and reads nothing after', async () => {
    const since = 1_000_000;
    const { gate, reads } = gateOver([since]);
    expect(await gate.allows(since + INLINE_GRACE_MS - 1)).toBe(false);
    expect(await gate.allows(since + INLINE_GRACE_MS - 1 + RECHECK_MS)).toBe(true);
    expect(await gate.allows(since + 10 * INLINE_GRACE_MS)).toBe(true);
    expect(reads).toHaveLength(2);
  });

  it('treats a failed read as shut: entries as items cost more, never a batch', async () => {
    const { gate, reads } = gateOver([new Error('throttled'), 0]);
    expect(await gate.allows(INLINE_GRACE_MS)).toBe(false);
    expect(await gate.allows(INLINE_GRACE_MS + RECHECK_MS)).toBe(true);
    expect(reads).toHaveLength(2);
  });
});
