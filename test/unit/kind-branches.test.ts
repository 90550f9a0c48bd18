import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { ROUND_KINDS } from '../../config/rules/round-kinds';

/**
 * What differs by round kind is read from its descriptor (config/rules/round-kinds.ts, docs/round-kinds.md): product
 * code outside the descriptors never compares a value to a round kind's name. Such a comparison is where a new kind
 * falls back to another kind's behaviour without a compile error. A loss's `type` (a policy loss named grpo, DPO's
 * step loss) is not a round kind and may be compared.
 */

const ROOT = path.resolve(__dirname, '../..');
const PRODUCT = ['workflows/', 'activities/', 'config/', 'workers/', 'cli/', 'providers/'];
/** The descriptors: the only files that may compare against a kind's name. */
const DESCRIPTORS = /^config\/rules\/round-kinds?(-[a-z0-9-]+)?\.ts$/;
const KIND_NAMES = new Set<string>(ROUND_KINDS);
const EQUALITY = new Set([
  ts.SyntaxKind.EqualsEqualsEqualsToken,
  ts.SyntaxKind.ExclamationEqualsEqualsToken,
  ts.SyntaxKind.EqualsEqualsToken,
  ts.SyntaxKind.ExclamationEqualsToken,
]);

function productFiles(): string[] {
  const listed = execFileSync('git', ['ls-files', '--', ...PRODUCT], { cwd: ROOT, encoding: 'utf8' }).split('\n');
  return listed.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && !DESCRIPTORS.test(f) && fs.existsSync(path.join(ROOT, f)));
}

const isKindName = (node: ts.Node): boolean => ts.isStringLiteralLike(node) && KIND_NAMES.has(node.text);
/** `loss.type`, `l.type`: a loss's type, whose names (grpo, dpo) are not round kinds. */
const isLossType = (node: ts.Node): boolean => ts.isPropertyAccessExpression(node) && node.name.text === 'type';

/** `file:line: text` of every comparison to a round kind's name in the source. */
function kindBranches(file: string, text: string): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const note = (node: ts.Node) => {
    const { line } = source.getLineAndCharacterOfPosition(node.getStart(source));
    found.push(`${file}:${line + 1}: ${node.getText(source).split('\n')[0]}`);
  };
  const visit = (node: ts.Node): void => {
    if (ts.isBinaryExpression(node) && EQUALITY.has(node.operatorToken.kind)) {
      const [literal, other] = isKindName(node.right) ? [node.right, node.left] : [node.left, node.right];
      if (isKindName(literal) && !isLossType(other)) note(node);
    }
    if (ts.isSwitchStatement(node) && !isLossType(node.expression)) {
      for (const clause of node.caseBlock.clauses) if (ts.isCaseClause(clause) && isKindName(clause.expression)) note(clause);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe('round kinds are branched on only through their descriptors', () => {
  test('no product file outside the descriptors compares a value to a round kind’s name', () => {
    const files = productFiles();
    expect(files.length).toBeGreaterThan(100);
    const branches = files.flatMap((f) => kindBranches(f, fs.readFileSync(path.join(ROOT, f), 'utf8')));
    expect(branches).toEqual([]);
  });

  test('the scan finds every form of a kind branch, and leaves a loss type alone', () => {
    const branches = kindBranches(
      'example.ts',
      [
        "if (spec.round.kind === 'dpo') f();",
        "const g = 'grpo' !== kind;",
        "switch (state.kind) { case 'sft': break; }",
        "if (loss.type === 'grpo') f();",
        "switch (loss.type) { case 'grpo': break; }",
        "if (reward.kind === 'regex') f();",
      ].join('\n'),
    );
    expect(branches).toEqual([
      "example.ts:1: spec.round.kind === 'dpo'",
      "example.ts:2: 'grpo' !== kind",
      "example.ts:3: case 'sft': break;",
    ]);
  });
});
