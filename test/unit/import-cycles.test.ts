import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * No two modules of ours import each other, directly or around a longer circle, types included: the lint rule
 * roundhouse/no-import-cycles (scripts/lint/no-import-cycles.mjs) finds them. `npm run lint` holds the repository to
 * it; these cases hold the rule to what it says, on modules written for the purpose.
 */
const probe = path.resolve(__dirname, '../helpers/lint-snippets.mjs');
const dir = path.resolve(__dirname, `../.import-cycles-${process.pid}`);

function cycleMessages(files: Record<string, string>, lint: string): string[] {
  for (const [name, code] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), code);
  const filePath = path.relative(path.resolve(__dirname, '../..'), path.join(dir, lint));
  const [messages] = JSON.parse(
    execFileSync(process.execPath, [probe], { input: JSON.stringify([{ filePath, code: files[lint] }]), encoding: 'utf8' }),
  ) as { ruleId: string | null; message: string }[][];
  return messages!.filter((m) => m.ruleId === 'roundhouse/no-import-cycles').map((m) => m.message);
}

beforeEach(() => fs.mkdirSync(dir, { recursive: true }));
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

test('two modules that import each other are a cycle, named from the linted module round to it', () => {
  const messages = cycleMessages(
    { 'a.ts': "import { b } from './b';\nexport const a = b;\n", 'b.ts': "import { a } from './a';\nexport const b = () => a;\n" },
    'a.ts',
  );
  expect(messages).toHaveLength(1);
  expect(messages[0]).toMatch(/a\.ts → .*b\.ts → .*a\.ts/);
});

test('a circle of type imports is a cycle too, however long', () => {
  const messages = cycleMessages(
    {
      'a.ts': "import type { C } from './c';\nexport type A = C[];\n",
      'b.ts': "import type { A } from './a';\nexport type B = A;\n",
      'c.ts': "import type { B } from './b';\nexport type C = B | number;\n",
    },
    'a.ts',
  );
  expect(messages).toHaveLength(1);
  expect(messages[0]).toMatch(/a\.ts → .*c\.ts → .*b\.ts → .*a\.ts/);
});

test('modules that import one way only are no cycle', () => {
  const messages = cycleMessages(
    {
      'a.ts': "import { b } from './b';\nexport const a = b;\n",
      'b.ts': "import fs from 'node:fs';\nexport const b = fs.existsSync('.');\n",
    },
    'a.ts',
  );
  expect(messages).toEqual([]);
});
