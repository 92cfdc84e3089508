/**
 * The model's steps name the code they mirror (`code: Class.method` or `code: function` comments in
 * model/protocol.pml, and the third column of model/mutations.txt and model/survivors.txt). A rename or removal
 * in shared/ that leaves the model behind fails here, so the model and the code cannot drift apart silently.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');

function sourcesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourcesUnder(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

const sources = sourcesUnder(join(root, 'shared')).map((path) => ({
  path,
  text: readFileSync(path, 'utf8'),
}));

/** `Class.method`, or a plain function, as named by the model. */
type CodeName =
  | { readonly kind: 'method'; readonly owner: string; readonly member: string }
  | {
      readonly kind: 'function';
      readonly name: string;
    };

/** `Class.method` and `function()` mentions in a piece of text. */
function parseNames(text: string): CodeName[] {
  const methods = [...text.matchAll(/\b([A-Z][A-Za-z0-9]*)\.([a-z][A-Za-z0-9]*)\b/g)].map(
    ([, owner, member]): CodeName => ({ kind: 'method', owner: owner!, member: member! }),
  );
  const functions = [...text.matchAll(/\b([a-z][A-Za-z0-9]*)\(\)/g)].map(
    ([, name]): CodeName => ({ kind: 'function', name: name! }),
  );
  return [...methods, ...functions];
}

/** Names in a model's `code:` comments (from `code:` to the end of the comment). */
function modelNames(file = 'protocol.pml'): CodeName[] {
  const model = readFileSync(join(root, 'model', file), 'utf8');
  return [...model.matchAll(/code: (.*?)(\*\/|$)/gm)].flatMap((match) => parseNames(match[1]!));
}

function mutationNames(file: string): CodeName[] {
  return readFileSync(join(root, 'model', file), 'utf8')
    .split('\n')
    .filter((line) => line.trim() && !line.startsWith('#'))
    .flatMap((line) => parseNames(line.split('|')[2] ?? ''));
}

/** The class body of `owner`: from its declaration to the next top-level class or end of file. */
function classBody(owner: string): string | undefined {
  for (const { text } of sources) {
    const start = text.search(new RegExp(`^(export )?class ${owner}\\b`, 'm'));
    if (start < 0) continue;
    const rest = text.slice(start + 1);
    const end = rest.search(/^(export )?(class|function) /m);
    return end < 0 ? rest : rest.slice(0, end);
  }
  return undefined;
}

function exists(name: CodeName): boolean {
  if (name.kind === 'function') {
    const declared = new RegExp(`(function\\*? ${name.name}\\b|\\b${name.name}\\s*=\\s*(async\\s*)?\\()`);
    return sources.some(({ text }) => declared.test(text));
  }
  const body = classBody(name.owner);
  return body !== undefined && new RegExp(`\\b${name.member}\\s*(<[^>]*>)?\\(`).test(body);
}

const label = (name: CodeName) => (name.kind === 'method' ? `${name.owner}.${name.member}` : name.name);

describe('the model names code that exists', () => {
  const fromModel = modelNames();
  const fromMutations = [...mutationNames('mutations.txt'), ...mutationNames('survivors.txt')];

  it('model steps name the Class.method they mirror', () => {
    const methods = fromModel.filter((name) => name.kind === 'method');
    // The model mirrors the processor, both ledgers, the coordinator, the promoter and the stores.
    expect(new Set(methods.map(label)).size).toBeGreaterThan(20);
    expect(methods.filter((name) => !exists(name)).map(label)).toEqual([]);
  });

  it('model steps name plain functions that exist', () => {
    const functions = fromModel.filter((name) => name.kind === 'function');
    expect(functions.map(label)).toEqual(expect.arrayContaining(['finalObjectKey', 'putIfAbsent']));
    expect(functions.filter((name) => !exists(name)).map(label)).toEqual([]);
  });

  it('the publish model names the publishing code it mirrors', () => {
    const names = modelNames('publish.pml');
    expect(names.map(label)).toEqual(
      expect.arrayContaining([
        'TableSnapshots.record',
        'TableSnapshots.advanceMark',
        'appendCheckpoint',
        'assertNotRolledBack',
        'missingFromMain',
      ]),
    );
    expect(names.filter((name) => !exists(name)).map(label)).toEqual([]);
  });

  it('every mutation names the code of the guard it weakens', () => {
    expect(fromMutations.length).toBeGreaterThan(10);
    expect(fromMutations.filter((name) => !exists(name)).map(label)).toEqual([]);
  });

  it('the check itself fails on a name the code does not have', () => {
    expect(exists({ kind: 'method', owner: 'StagingLedger', member: 'stage' })).toBe(true);
    expect(exists({ kind: 'method', owner: 'StagingLedger', member: 'stageEverything' })).toBe(false);
    expect(exists({ kind: 'method', owner: 'NoSuchClass', member: 'stage' })).toBe(false);
    expect(exists({ kind: 'function', name: 'noSuchFunctionAnywhere' })).toBe(false);
  });
});
