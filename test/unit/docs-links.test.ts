import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(__dirname, '../..');
const pages = [
  'README.md',
  ...fs
    .readdirSync(path.join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** The markdown outside code: fenced blocks and inline code hold examples, not links. */
function prose(markdown: string): string {
  return markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

function anchorsIn(file: string): Set<string> {
  const headings =
    fs
      .readFileSync(file, 'utf8')
      .replace(/^```[\s\S]*?^```/gm, '')
      .match(/^#{1,6} .+$/gm) ?? [];
  return new Set(headings.map((h) => anchorOf(h.replace(/^#+ /, '').replace(/`/g, ''))));
}

test.each(pages)('every relative link in %s leads to a file (and heading) that exists', (page) => {
  const file = path.join(root, page);
  const broken: string[] = [];
  for (const [, target] of prose(fs.readFileSync(file, 'utf8')).matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^[a-z]+:/i.test(target!)) continue; // https:, mailto:
    const [linked, anchor] = target!.split('#') as [string, string | undefined];
    const destination = linked ? path.resolve(path.dirname(file), linked) : file;
    if (path.relative(root, destination).startsWith('..')) broken.push(`${target}: outside the repository`);
    else if (!fs.existsSync(destination)) broken.push(`${target}: no such file`);
    else if (anchor && destination.endsWith('.md') && !anchorsIn(destination).has(anchor)) broken.push(`${target}: no such heading`);
  }
  expect(broken).toEqual([]);
});
