/**
 * The replay plans' ledger items (`plan.ts`): one item per generation under `<pl>#REPLAY`, written by conditional
 * writes only, so two operators (or a retried command) cannot both create generation G, a switch is requested
 * once, and the coordinator notes the checkpoint that switched once.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { type DynamoDBDocumentClient, GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { classified, send, sendConditional } from '../aws/dynamo.ts';
import { isTimestamp } from '../kafka/offsets-by-time.ts';
import { keys } from '../ledger/layout.ts';
import { itemsUnder } from '../ledger/staged-entries.ts';
import {
  checkGeneration,
  checkRanges,
  ReplayPlanError,
  type ReplayRange,
} from '../sink/generation-switch.ts';
import type { ReplayPlan, ReplayTimes } from './plan.ts';

/** The plan's item holds something a plan cannot be (written by hand, or by a defect): never acted on. */
export class MalformedReplayPlanError extends ReplayPlanError {}

const optionalNumber = (value: unknown): number | undefined =>
  typeof value === 'number' && Number.isSafeInteger(value) ? value : undefined;

/** The times a plan was asked for (for the record only: a malformed value is dropped, not the plan). */
function timesFromItem(value: unknown): ReplayTimes | undefined {
  const v = value as { from?: unknown; to?: unknown } | undefined;
  if (typeof v !== 'object' || v === null || !isTimestamp(v.from)) return undefined;
  return isTimestamp(v.to) ? { from: v.from, to: v.to } : { from: v.from };
}

/** A plan from its item; throws {@link MalformedReplayPlanError} for anything else. */
export function planFromItem(item: Record<string, unknown>): ReplayPlan {
  try {
    const generation = item.generation as number;
    checkGeneration(generation);
    if (item.sk !== keys.replayPlan('', generation).sk)
      throw new ReplayPlanError('sort key and generation differ');
    if (typeof item.createdAt !== 'number') throw new ReplayPlanError('no createdAt');
    const ranges = checkRanges((item.ranges ?? []) as ReplayRange[]);
    const switchRequestedAt = optionalNumber(item.switchRequestedAt);
    const switchedIn = optionalNumber(item.switchedIn);
    const times = timesFromItem(item.times);
    return {
      generation,
      createdAt: item.createdAt,
      ranges,
      ...(times === undefined ? {} : { times }),
      ...(switchRequestedAt === undefined ? {} : { switchRequestedAt }),
      ...(switchedIn === undefined ? {} : { switchedIn }),
    };
  } catch (error) {
    throw new MalformedReplayPlanError(
      `replay plan item ${String(item.sk)} is malformed: ${(error as Error).message}`,
    );
  }
}

export type RequestSwitchOutcome = 'requested' | 'already-requested' | 'already-switched' | 'no-plan';

export class ReplayStore {
  private readonly doc: DynamoDBDocumentClient;

  constructor(
    dynamodb: DynamoDBClient,
    private readonly table: string,
    private readonly pipeline: string,
  ) {
    this.doc = ledgerDocumentClient(dynamodb);
  }

  /**
   * Every plan, by generation (strongly consistent). A malformed item throws {@link MalformedReplayPlanError}, unless
   * `onMalformed` is given: it is then told, and the item left out (the coordinator must not stop every checkpoint
   * for one item an operator wrote by hand).
   */
  async list(onMalformed?: (error: MalformedReplayPlanError) => void): Promise<ReplayPlan[]> {
    const items = await classified('dynamodb:Query(replay plans)', () =>
      itemsUnder(this.doc, this.table, keys.replayPk(this.pipeline)),
    );
    const plans: ReplayPlan[] = [];
    for (const item of items) {
      try {
        plans.push(planFromItem(item));
      } catch (error) {
        if (!(error instanceof MalformedReplayPlanError) || onMalformed === undefined) throw error;
        onMalformed(error);
      }
    }
    return plans.sort((a, b) => a.generation - b.generation);
  }

  async read(generation: number): Promise<ReplayPlan | undefined> {
    const { Item: item } = await send(
      this.doc,
      new GetCommand({
        TableName: this.table,
        Key: keys.replayPlan(this.pipeline, generation),
        ConsistentRead: true,
      }),
      'dynamodb:GetItem(replay plan)',
    );
    return item === undefined ? undefined : planFromItem(item);
  }

  /** Writes generation `generation`'s plan; false when that generation exists already. */
  async create(
    generation: number,
    ranges: readonly ReplayRange[],
    now: number,
    times?: ReplayTimes,
  ): Promise<boolean> {
    checkGeneration(generation);
    const checked = checkRanges(ranges);
    const created = await sendConditional(
      this.doc,
      new PutCommand({
        TableName: this.table,
        Item: {
          ...keys.replayPlan(this.pipeline, generation),
          generation,
          createdAt: now,
          ranges: checked,
          ...(times === undefined ? {} : { times }),
        },
        ConditionExpression: 'attribute_not_exists(pk)',
      }),
      'dynamodb:PutItem(replay plan)',
    );
    return created !== undefined;
  }

  /** Marks the plan's switch requested (once). */
  async requestSwitch(generation: number, now: number): Promise<RequestSwitchOutcome> {
    const requested = await sendConditional(
      this.doc,
      new UpdateCommand({
        TableName: this.table,
        Key: keys.replayPlan(this.pipeline, generation),
        UpdateExpression: 'SET switchRequestedAt = :now',
        ConditionExpression: 'attribute_exists(pk) AND attribute_not_exists(switchRequestedAt)',
        ExpressionAttributeValues: { ':now': now },
      }),
      'dynamodb:UpdateItem(replay switch)',
    );
    if (requested !== undefined) return 'requested';
    const plan = await this.read(generation);
    if (plan === undefined) return 'no-plan';
    return plan.switchedIn === undefined ? 'already-requested' : 'already-switched';
  }

  /**
   * Notes that checkpoint `checkpointId`'s manifest switched to the generation (the coordinator's commit). Kept
   * when already noted: a commit that is rolled forward again writes the same note, and a lower checkpoint that
   * switched first stays the one named.
   */
  async markSwitched(generation: number, checkpointId: number): Promise<void> {
    await sendConditional(
      this.doc,
      new UpdateCommand({
        TableName: this.table,
        Key: keys.replayPlan(this.pipeline, generation),
        UpdateExpression: 'SET switchedIn = :id',
        ConditionExpression: 'attribute_exists(pk) AND attribute_not_exists(switchedIn)',
        ExpressionAttributeValues: { ':id': checkpointId },
      }),
      'dynamodb:UpdateItem(replay switched)',
    );
  }
}
