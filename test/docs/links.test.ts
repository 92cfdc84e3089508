/**
 * Every relative link in the README, CONTRIBUTING.md and docs/ points at a file that exists, and every `#anchor` at
 * a heading of that file (GitHub's slugs), so moving or renaming a section cannot leave a dead link behind.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const pages = [
  'README.md',
  'CONTRIBUTING.md',
  ...readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => join('docs', name)),
];

/** GitHub's heading anchor: lower case, punctuation dropped (hyphens kept), spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchorsOf(text: string): Set<string> {
  const withoutCode = text.replace(/^```[\s\S]*?^```$/gm, '');
  const headings = [...withoutCode.matchAll(/^#{1,6}\s+(.+)$/gm)].map((match) => slug(match[1]!));
  return new Set(headings);
}

function linksOf(text: string): string[] {
  const withoutCode = text.replace(/^```[\s\S]*?^```$/gm, '').replace(/`[^`\n]*`/g, '');
  return [...withoutCode.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((match) => match[1]!)
    .filter((target) => !/^[a-z]+:/.test(target));
}

describe('docs links', () => {
  it('finds the pages and their links (an empty scan would pass vacuously)', () => {
    expect(pages).toContain('docs/architecture.md');
    expect(linksOf(readFileSync(join(root, 'README.md'), 'utf8')).length).toBeGreaterThan(5);
  });

  it('knows how GitHub turns headings into anchors', () => {
    expect(slug('The processor: exactly-once processing (P1–P6)')).toBe(
      'the-processor-exactly-once-processing-p1p6',
    );
    expect(slug('`eos verify`')).toBe('eos-verify');
  });

  for (const page of pages) {
    it(`${page}: every relative link and anchor resolves`, () => {
      const broken: string[] = [];
      for (const link of linksOf(readFileSync(join(root, page), 'utf8'))) {
        const [path, anchor] = link.split('#') as [string, string | undefined];
        const target = path === '' ? join(root, page) : normalize(join(root, dirname(page), path));
        if (!existsSync(target)) {
          broken.push(`${link}: no file ${relative(root, target)}`);
          continue;
        }
        if (
          anchor !== undefined &&
          target.endsWith('.md') &&
          !anchorsOf(readFileSync(target, 'utf8')).has(anchor)
        ) {
          broken.push(`${link}: no heading #${anchor} in ${relative(root, target)}`);
        }
      }
      expect(broken).toEqual([]);
    });
  }
});
