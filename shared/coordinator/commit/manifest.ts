/**
 * Manifest N (C5, C7): its bytes are a canonical, pure function of the checkpoint: the digest-checked plans, the
 * promotion records that must match them object for object, the cut pages and the replay switches the checkpoint
 * makes. A retried or rolled-forward commit therefore writes the same manifest.
 */
import type { CheckpointRecord } from '../../ledger/checkpoints.ts';
import { MalformedReplayPlanError } from '../../replay/store.ts';
import type { GenerationSwitch } from '../../sink/generation-switch.ts';
import type { Manifest } from '../../sink/manifest.ts';
import { sortManifestFiles } from '../../sink/manifest-store.ts';
import type { CoordinatorParts } from '../parts.ts';
import { PromotionRecordError, type ShardPlan, type ShardPromotion } from '../promote/plan-store.ts';
import { shardList } from '../shards.ts';

type ManifestParts = Pick<CoordinatorParts, 'settings' | 'store' | 'plans' | 'replays' | 'log'>;

/** The manifest of a COMMITTING checkpoint; `votedPlan` reads a shard's voted plan (`promote/voted-plan.ts`). */
export async function buildManifest(
  parts: ManifestParts,
  record: CheckpointRecord,
  votedPlan: (shard: number) => Promise<ShardPlan>,
): Promise<Manifest> {
  const promotions = await Promise.all(
    shardList(record.shardCount).map(async (shard) => {
      const [plan, promotion] = await Promise.all([
        votedPlan(shard),
        parts.plans.readPromotion(record.checkpointId, record.attempt, shard),
      ]);
      return matchPromotion(plan, promotion);
    }),
  );
  const cut: Record<string, number> = {};
  const previousCut: Record<string, number> = {};
  for (const entry of await parts.store.readCut(record)) {
    cut[entry.partition] = entry.cut;
    if (entry.previous >= 0) previousCut[entry.partition] = entry.previous;
  }
  return {
    version: 1,
    pipeline: parts.settings.pipelineId,
    checkpointId: record.checkpointId,
    previousCheckpointId: record.previousCheckpointId,
    // encodeManifest sorts both cuts: the bytes do not depend on the order the pages came back in.
    cut,
    previousCut,
    // The decision time, not "now": a retried commit must write the same bytes.
    committedAt: new Date(record.decidedAt ?? record.begunAt).toISOString(),
    files: sortManifestFiles(promotions.flatMap((promotion) => promotion.files)),
    ...(await switchesOf(parts, record)),
  };
}

/**
 * The manifest's `generations`: each switched plan's ranges (plans never change once written). A plan that is
 * gone or malformed by now (only an operator's hand can do that) is left out, loudly: the decided checkpoint must
 * commit, and without the switch readers keep the earlier generation, which loses nothing.
 */
async function switchesOf(
  parts: Pick<CoordinatorParts, 'replays' | 'log'>,
  record: CheckpointRecord,
): Promise<{ generations?: GenerationSwitch[] }> {
  const found = await Promise.all(
    (record.generationSwitches ?? []).map(async (generation) => {
      try {
        const plan = await parts.replays.read(generation);
        if (plan !== undefined) return [{ generation, ranges: plan.ranges }];
        parts.log.error('a switched replay plan is gone: the checkpoint commits without its switch', {
          checkpointId: record.checkpointId,
          generation,
        });
      } catch (error) {
        if (!(error instanceof MalformedReplayPlanError)) throw error;
        parts.log.error('a switched replay plan is malformed: the checkpoint commits without its switch', {
          checkpointId: record.checkpointId,
          generation,
          error: error.message,
        });
      }
      return [];
    }),
  );
  const generations = found.flat();
  return generations.length === 0 ? {} : { generations };
}

/**
 * Commit's check of one shard's promotion record against its digest-checked plan: the same objects, in order, each
 * with the planned key, range and record count, and the SHA-256 and size of its candidate or slice (a plan without
 * candidates leaves those to promote, which computed them from the bytes it wrote); everything that decides what a
 * manifest may list comes from the voted plan.
 */
export function matchPromotion(plan: ShardPlan, promotion: ShardPromotion): ShardPromotion {
  const where = `checkpoint ${plan.checkpointId} attempt ${plan.attempt} shard ${plan.shard}`;
  if (
    promotion.checkpointId !== plan.checkpointId ||
    promotion.attempt !== plan.attempt ||
    promotion.shard !== plan.shard ||
    promotion.files.length !== plan.objects.length
  ) {
    throw new PromotionRecordError(`${where}: the promotion record does not match the voted plan`);
  }
  plan.objects.forEach((object, index) => {
    const file = promotion.files[index]!;
    const same =
      file.key === object.finalKey &&
      file.stream === object.stream &&
      file.topic === object.topic &&
      file.partition === object.partition &&
      file.firstOffset === object.firstOffset &&
      file.lastOffset === object.lastOffset &&
      file.recordCount === object.recordCount &&
      (file.format ?? 'ndjson') === (object.format ?? 'ndjson') &&
      // A candidate's SHA-256 and size are voted for, or a slice's of a merged object: the manifest lists those.
      (object.slice !== undefined
        ? file.sha256 === object.slice.sha256 &&
          file.bytes === object.slice.bytes &&
          file.sliceStart === object.slice.start
        : file.sliceStart === undefined &&
          (object.candidate === undefined ||
            (file.sha256 === object.candidate.sha256 && file.bytes === object.candidate.bytes)));
    if (!same)
      throw new PromotionRecordError(`${where}: promoted ${file.key}, the voted plan has ${object.finalKey}`);
  });
  return promotion;
}
