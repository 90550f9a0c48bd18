import fs from 'node:fs';
import path from 'node:path';
import { abilitiesOf, DIALECTS, type Dialect, type DialectAbilities } from '../../config/rules/dialects';

/**
 * What the docs say each dialect can do is what the dialect table (config/rules/dialects.ts) says: docs/providers.md's
 * "What each dialect can do" cell by cell, and README's provider table row by row where a row states an ability.
 * A disagreement names the document, the row, the column, the cell and what the table holds.
 */

const root = path.resolve(__dirname, '../..');

interface MarkdownTable {
  header: string[];
  rows: string[][];
}

/** The markdown table whose header row starts with `firstHeader`, its cells trimmed (`\|` inside a cell kept). */
function tableIn(file: string, firstHeader: string): MarkdownTable {
  const lines = fs.readFileSync(path.join(root, file), 'utf8').split('\n');
  const cells = (line: string) =>
    line
      .replace(/^\||\|$/g, '')
      .split(/(?<!\\)\|/)
      .map((c) => c.trim());
  const start = lines.findIndex((l) => l.startsWith('|') && cells(l)[0] === firstHeader);
  if (start < 0) throw new Error(`${file}: no table whose first header is '${firstHeader}'`);
  const body = lines.slice(start + 2);
  const end = body.findIndex((l) => !l.startsWith('|'));
  return { header: cells(lines[start]!), rows: body.slice(0, end < 0 ? undefined : end).map(cells) };
}

/** A cell's stated value: what comes before its explanation (`: …`, ` (…)`, `; …`). */
const statedValue = (cell: string) => cell.split(/:\s|\s\(|;\s/)[0]!.trim();

const yesNo = (b: boolean) => (b ? 'yes' : 'no');

/** Each ability as docs/providers.md's table states it. */
const STATED: Record<string, (a: DialectAbilities) => string> = {
  speaks: (a) => a.speaks,
  embedded: (a) => yesNo(a.embedded),
  customLoss: (a) => yesNo(a.customLoss),
  policyLosses: (a) => a.policyLosses.join(', '),
  referenceSession: (a) => yesNo(a.referenceSession),
  wandb: (a) => yesNo(a.wandb),
  billing: (a) => a.billing,
  sessionRoutes: (a) => a.sessionRoutes,
  loraSessionsPerResource: (a) => String(a.loraSessionsPerResource),
  'sampling.seeds': (a) => a.sampling.seeds,
  'sampling.stopStrings': (a) => a.sampling.stopStrings,
  checkpointTtl: (a) => yesNo(a.checkpointTtl),
  runSettings: (a) => yesNo(a.runSettings),
};

/** The dialects a column is about: `together / local` is both. */
const dialectsOf = (column: string): Dialect[] =>
  column.split('/').map((d) => {
    const dialect = d.trim() as Dialect;
    if (!DIALECTS.includes(dialect)) throw new Error(`a column of no dialect: '${column}'`);
    return dialect;
  });

test("docs/providers.md's table states every ability of the dialect table, on every dialect, as the table holds it", () => {
  const table = tableIn('docs/providers.md', 'ability');
  expect(table.header.slice(1).flatMap(dialectsOf).sort()).toEqual([...DIALECTS].sort());
  const documented = table.rows.map((row) => /^`([\w.]+)`/.exec(row[0]!)?.[1]);
  const held = Object.keys(abilitiesOf('together'))
    .filter((k) => k !== 'name' && k !== 'why')
    .flatMap((k) => (k === 'sampling' ? ['sampling.seeds', 'sampling.stopStrings'] : [k]));
  expect([...documented].sort()).toEqual(held.sort());
  const disagreements = table.rows.flatMap((row) => {
    const ability = /^`([\w.]+)`/.exec(row[0]!)![1]!;
    return table.header.slice(1).flatMap((column, i) =>
      dialectsOf(column).flatMap((dialect) => {
        const expected = STATED[ability]!(abilitiesOf(dialect));
        const cell = row[i + 1]!;
        return statedValue(cell) === expected ? [] : [`${ability} on ${dialect}: the docs say '${cell}', the table ${expected}`];
      }),
    );
  });
  expect(disagreements).toEqual([]);
});

/** README's provider table: the rows that state an ability, and what a cell starts with for each value. */
const README_ROWS: [row: string, says: (a: DialectAbilities) => string | RegExp][] = [
  [
    'GRPO, loss `importance_sampling` or `ppo`',
    (a) => yesNo(['ppo', 'importance_sampling'].every((l) => a.policyLosses.includes(l as 'ppo'))),
  ],
  ['GRPO, loss `grpo`', (a) => (a.policyLosses.includes('grpo') ? 'yes' : 'refused: no such loss')],
  ['DPO (a custom loss)', (a) => (a.customLoss ? 'yes' : 'refused')],
  ['`tracking.wandb`', (a) => (a.wandb ? 'yes' : 'refused')],
  ['what a round costs', (a) => (a.billing === 'tokens' ? 'tokens × `provider.tokenPrices`' : 'GPU-minutes')],
  ['sampling seed', (a) => (a.sampling.seeds === 'per-draw' ? 'derived per draw' : 'none unless `sampling.seed`')],
  [
    'stop strings',
    (a) => ({ sent: /^sent$/, 'per-model': /^sent only to models whose listing says/, never: /^never sent/ })[a.sampling.stopStrings],
  ],
  [
    'sessions per resource',
    (a) =>
      ({ 'per-model': /^up to \d+ LoRA/, '1': /^1: a run is one session/, unpublished: /^not published/ })[
        String(a.loraSessionsPerResource)
      ]!,
  ],
  [
    'what the trainer is created with',
    (a) =>
      new RegExp(
        `^${a.runSettings ? '(?=.*`provider\\.baseten`)' : '(?!.*`provider\\.baseten`)'}${a.checkpointTtl ? '(?=.*`retention\\.ttl`)' : '(?!.*`retention\\.ttl`)'}`,
      ),
  ],
];

test("README's provider table says of each dialect what the dialect table holds", () => {
  const table = tableIn('README.md', '');
  expect(table.header.slice(1).flatMap(dialectsOf).sort()).toEqual([...DIALECTS].sort());
  const disagreements = README_ROWS.flatMap(([rowStart, says]) => {
    const row = table.rows.find((r) => r[0]!.startsWith(rowStart));
    if (!row) return [`no row '${rowStart}'`];
    return table.header.slice(1).flatMap((column, i) =>
      dialectsOf(column).flatMap((dialect) => {
        const expected = says(abilitiesOf(dialect));
        const cell = row[i + 1]!;
        const agrees = typeof expected === 'string' ? cell.startsWith(expected) : expected.test(cell);
        return agrees ? [] : [`'${rowStart}' on ${dialect}: README says '${cell}', the table ${String(expected)}`];
      }),
    );
  });
  expect(disagreements).toEqual([]);
});
