/**
 * The parts of a staging write's fence update that concern inline staged entries (`inline-entries.ts`): the
 * entry-item mark every write leaves, each inline entry's attribute (and the key template it shares), and, for a
 * chunk past the inline budget, the entries it moves out of the fence into entry items. `staging-effects.ts`
 * decides which applies, and `staging-items.ts` joins the parts into one UpdateItem or transaction item.
 */
import { NO_FENCE } from './fence-reads.ts';
import {
  ENTRY_ITEMS_NOTED_AT,
  ENTRY_ITEMS_UP_TO,
  type InlineItem,
  inlineBytesIn,
  inlineItemsOf,
  type KeyTemplates,
  packEntry,
  templateAttribute,
} from './inline-entries.ts';
import { keys, type Stream } from './layout.ts';
import type { StagedFileEntry } from './records.ts';

/** A part of an UpdateItem: its SET and REMOVE clauses' terms, its condition's, and the names and values they use. */
export interface UpdateParts {
  /** `, a = :a, …` (appended to a SET clause). */
  readonly set: string;
  /** `, #a, …` (appended to a REMOVE clause). */
  readonly remove: string;
  /** ` AND …` (appended to a condition). */
  readonly condition: string;
  readonly names: Record<string, string>;
  readonly values: Record<string, unknown>;
}

/** Inline entries one transaction moves into items at most (its expressions stay far under DynamoDB's 4 KB). */
export const MAX_FLUSHED_ENTRIES = 60;

function markParts(mark: number) {
  return {
    names: { '#itemsUpTo': ENTRY_ITEMS_UP_TO, '#notedAt': ENTRY_ITEMS_NOTED_AT } as Record<string, string>,
    values: { ':itemsUpTo': mark } as Record<string, unknown>,
    sets: ['#itemsUpTo = :itemsUpTo', '#notedAt = :new'],
  };
}

/**
 * The update that puts `entries` inline: the mark (noted at the write's new offset, `:new`), each entry's attribute,
 * and each key template an entry shares, on condition the fence holds it, or created on condition it has none (a
 * fence that holds another fails the write as a moved fence would, and the processor reads it again).
 */
export function inlineEntriesUpdate(
  entries: readonly StagedFileEntry[],
  templates: KeyTemplates | undefined,
  mark: number,
): UpdateParts {
  const { names, values, sets } = markParts(mark);
  const conditions: string[] = [];
  entries.forEach((entry, i) => {
    const { name, value, template } = packEntry(entry, templates);
    names[`#e${i}`] = name;
    values[`:e${i}`] = value;
    sets.push(`#e${i} = :e${i}`);
    if (template === undefined) return;
    names[`#k${i}`] = template.attribute;
    values[`:k${i}`] = template.value;
    if (template.fresh) {
      sets.push(`#k${i} = :k${i}`);
      conditions.push(`attribute_not_exists(#k${i})`);
    } else conditions.push(`#k${i} = :k${i}`);
  });
  const condition = conditions.map((c) => ` AND ${c}`).join('');
  return { set: `, ${sets.join(', ')}`, remove: '', condition, names, values };
}

/**
 * The update of a write whose entries are items: the mark, and the removal of the inline entries it moves into
 * items, on condition each is still there (cleanup may have removed it: the write then fails as a moved fence
 * would, and the processor reads the fence again).
 */
export function movedEntriesUpdate(moved: readonly InlineItem[], mark: number): UpdateParts {
  const { names, values, sets } = markParts(mark);
  const removed = moved.map((item, i) => {
    names[`#f${i}`] = item.at.attribute;
    return `#f${i}`;
  });
  return {
    set: `, ${sets.join(', ')}`,
    remove: removed.map((name) => `, ${name}`).join(''),
    condition: removed.map((name) => ` AND attribute_exists(${name})`).join(''),
    names,
    values,
  };
}

/**
 * The inline entries a chunk past the inline budget moves into entry items: each well-formed one of `flush` (the
 * fence's inline attributes as just read, decoded with its key templates) at or below the fence it read, at most
 * {@link MAX_FLUSHED_ENTRIES}. Without the move the fence stays full until cleanup, and every chunk till then pays a
 * transaction with the whole fence (`2 ceil(F) + 2` units); with it, one transaction pays two units an entry once
 * and the fence is small again.
 */
export function movedEntries(at: {
  readonly pipeline: string;
  readonly topic: string;
  readonly partition: number;
  readonly expectedOffset: number;
  readonly templates?: KeyTemplates;
  readonly flush?: Readonly<Record<string, unknown>>;
}): InlineItem[] {
  const templates = Object.fromEntries(
    Object.entries(at.templates ?? {}).map(([stream, template]) => [
      templateAttribute(stream as Stream),
      template,
    ]),
  );
  const where = {
    pipeline: at.pipeline,
    topic: at.topic,
    partition: at.partition,
    fence: keys.fence(at.pipeline, at.topic, at.partition),
  };
  return inlineItemsOf({ ...at.flush, ...templates }, where, { above: NO_FENCE, upTo: at.expectedOffset })
    .filter((item) => item.kind === 'entry')
    .slice(0, MAX_FLUSHED_ENTRIES);
}

/** The inline bytes a fence holding `flush` keeps once `moved` left it (those that could not move). */
export function inlineBytesLeft(
  flush: Readonly<Record<string, unknown>>,
  moved: readonly InlineItem[],
): number {
  const gone = new Set(moved.map((item) => item.at.attribute));
  return inlineBytesIn(Object.fromEntries(Object.entries(flush).filter(([name]) => !gone.has(name))));
}
