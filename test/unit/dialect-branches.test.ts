import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { DIALECTS } from '../../config/rules/dialects';

/**
 * Product code asks the dialect table (config/rules/dialects.ts `abilitiesOf`) what a dialect can do; it never
 * compares a provider's kind to a dialect's name. A branch on a name is a silent fall-through for the next dialect;
 * a table entry is a compile error until it is written. How a dialect speaks (providers/<dialect>/) and the emulator
 * are the dialects themselves, and are not scanned.
 */

const root = path.resolve(__dirname, '../..');
const SCANNED = ['workflows', 'activities', 'config', 'workers', 'cli'];
const TABLE = 'config/rules/dialects.ts';

const name = `['"\`](?:${DIALECTS.join('|')})['"\`]`;
const BRANCH = new RegExp(
  [`(?:===|!==)\\s*${name}`, `${name}\\s*(?:===|!==)`, `\\bcase\\s+${name}\\s*:`, `\\.includes\\(\\s*${name}\\s*\\)`].join('|'),
);

/** Each line of `text` that branches on a dialect's name, as `file:line: code`. */
function branchesIn(file: string, text: string): string[] {
  return text.split('\n').flatMap((line, i) => (BRANCH.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : []));
}

test('the scan finds every form of a branch on a dialect name, and not a dialect named as a value', () => {
  const code = [
    "if (spec.provider.kind === 'baseten') return;",
    'const embedded = "local" !== kind;',
    '  case `tinker`:',
    "const withLocal = kinds.includes('local');",
    "const spec = { kind: 'together', model: '' };",
    "const kinds = (opts.provider.length ? opts.provider : ['local']) as Dialect[];",
  ].join('\n');
  expect(branchesIn('x.ts', code)).toEqual([
    "x.ts:1: if (spec.provider.kind === 'baseten') return;",
    'x.ts:2: const embedded = "local" !== kind;',
    'x.ts:3: case `tinker`:',
    "x.ts:4: const withLocal = kinds.includes('local');",
  ]);
});

test('no product code outside the dialect table branches on a dialect name', () => {
  const files = execFileSync('git', ['ls-files', '--', ...SCANNED], { cwd: root, encoding: 'utf8' })
    .split('\n')
    .filter((f) => /\.(ts|js|mjs)$/.test(f) && f !== TABLE && fs.existsSync(path.join(root, f)));
  expect(files.length).toBeGreaterThan(50);
  const branches = files.flatMap((f) => branchesIn(f, fs.readFileSync(path.join(root, f), 'utf8')));
  expect(branches).toEqual([]);
});
