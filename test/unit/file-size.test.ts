import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * No source file past 500 lines (issue #45): a file that long has more than one job. The emulator's learner (a
 * numeric model kept whole on purpose) and recorded fixtures and data are not held to it.
 */
const MAX_LINES = 500;
const root = path.resolve(__dirname, '../..');
const exempt = [/^emulator\/learner\//, /(^|\/)node_modules\//, /(^|\/)fixtures\//, /(^|\/)data\//];

function trackedSources(): string[] {
  const out = execFileSync('git', ['ls-files', '-z', '--', '*.ts', '*.py', '*.js', '*.mjs'], { cwd: root, encoding: 'utf8' });
  return out
    .split('\0')
    .filter((file) => file !== '' && !exempt.some((re) => re.test(file)))
    .filter((file) => fs.existsSync(path.join(root, file)));
}

function lineCount(file: string): number {
  const text = fs.readFileSync(path.join(root, file), 'utf8');
  if (text === '') return 0;
  return text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
}

describe('file size', () => {
  it('finds the tracked sources it checks', () => {
    const files = trackedSources();
    expect(files).toContain('workflows/round/round.ts');
    expect(files).toContain('python/src/roundhouse/__init__.py');
    expect(files.some((f) => f.startsWith('emulator/learner/'))).toBe(false);
  });

  it(`keeps every tracked source file at ${MAX_LINES} lines or fewer`, () => {
    const over = trackedSources()
      .map((file) => ({ file, lines: lineCount(file) }))
      .filter(({ lines }) => lines > MAX_LINES)
      .map(({ file, lines }) => `${file}: ${lines} lines`);
    expect(over).toEqual([]);
  });
});
