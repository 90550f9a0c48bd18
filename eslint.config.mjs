// ESLint (flat config): typescript-eslint with type information, and the import walls of DESIGN.md's layout table.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import js from '@eslint/js';
import { defineConfig, globalIgnores } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';
import { noImportCycles } from './scripts/lint/no-import-cycles.mjs';

const root = path.dirname(fileURLToPath(import.meta.url));

// ---------------------------------------------------------------------------------------------------------------
// Import walls. Each folder gets exactly one `no-restricted-imports` setting (a later setting of a rule replaces an
// earlier one, it does not merge). Imports between our folders are relative, so `(\.\./)+name(/|$)` is the import of
// the top-level folder `name` from any depth below another top-level folder.
// ---------------------------------------------------------------------------------------------------------------
const folder = (...names) => `^(\\.\\./)+(${names.join('|')})(/|$)`;
const temporal = (...packages) => `^@temporalio/(${packages.join('|')})(/|$)`;
const wall = (regex, message, { types = false } = {}) => ({ regex, message, allowTypeImports: types });

/**
 * What a workflow may import at runtime: the workflow SDK, other workflow modules (a sibling, or one folder over from a
 * workflow's own folder such as workflows/round/) and config/rules/ (pure, workflow-safe).
 */
const workflowRuntimeAllowed = [
  '@temporalio/workflow$',
  '\\./', // sibling workflow modules
  '\\.\\./(?!\\.\\.|config/)[^/]+(/[^/]+)?$', // workflows/<folder>/ importing workflows/<module> or workflows/<other folder>/<module>
  '(\\.\\./)+config/rules/[^/]+$',
];
const ORCHESTRATOR = ['activities', 'providers', 'emulator', 'workers', 'cli'];

const configWalls = [
  wall(folder('activities', 'workflows', 'providers', 'emulator', 'workers', 'cli'), 'config/ imports nothing of ours (DESIGN.md layout).'),
  wall(temporal('.+'), 'config/ never knows Temporal: providers/ and workflows/ load it.'),
];

const walls = {
  config: configWalls,
  'config/rules': [
    ...configWalls,
    wall(
      '^(?!\\./)',
      'config/rules/ is what workflows import at runtime: at runtime it imports only its siblings (no Node builtins, no npm packages, nothing of config/io/); types from anywhere in config/.',
      { types: true },
    ),
  ],
  workflows: [
    wall(
      folder(...ORCHESTRATOR),
      'workflows/ import activities/, providers/, emulator/, workers/, cli/ only as types (`import type`): workflow code runs in the deterministic sandbox.',
      { types: true },
    ),
    wall(
      `^(?!${workflowRuntimeAllowed.join('|')}|${folder(...ORCHESTRATOR)})`,
      'workflows/ import at runtime only @temporalio/workflow, sibling workflows and config/rules/ (pure, workflow-safe); Node builtins, npm packages and config/io/ only as types.',
      { types: true },
    ),
  ],
  activities: [
    wall(folder('workflows'), 'activities/ import workflows/ only as types (`import type`); shared runtime values belong in config/.', {
      types: true,
    }),
    wall(temporal('workflow'), 'activities/ import @temporalio/workflow only as types: its functions work only inside a workflow.', {
      types: true,
    }),
    wall(folder('emulator', 'workers', 'cli'), 'activities/ import providers/ and config/ only (DESIGN.md layout).'),
  ],
  providers: [
    wall(folder('activities', 'workflows', 'emulator', 'workers', 'cli'), 'providers/ import config/ only (DESIGN.md layout).'),
    wall(temporal('.+'), 'providers/ never know Temporal (DESIGN.md layout): map provider errors to Temporal failures in activities/.'),
  ],
  emulator: [
    wall(
      folder('config', 'activities', 'workflows', 'providers', 'workers', 'cli'),
      'emulator/ imports nothing of the orchestrator: it shares no code or schemas with the clients it stands in for.',
    ),
    wall(temporal('.+'), 'emulator/ imports nothing of the orchestrator, Temporal included.'),
  ],
  workers: [wall(folder('cli'), 'workers/ import everything but cli/ (DESIGN.md layout).')],
  cli: [
    wall(
      folder('activities', 'emulator', 'providers'),
      'cli/ reaches activities/, emulator/ and providers/ only through workers/ entry points (DESIGN.md layout).',
    ),
    wall(
      '^(\\.\\./)+workflows/(?!([^/]+/)?[^/]*contract$).*$',
      'cli/ imports workflows/ at runtime from the index (workflow functions, to start them by typed reference) and the contracts (workflows/<folder>/contract.ts, workflows/*-contract.ts); other workflow modules only as types.',
      { types: true },
    ),
    wall(
      temporal('worker', 'activity', 'workflow', 'testing'),
      'cli/ uses the Temporal client; workers/ own the worker, activity and test-server packages.',
      {
        types: true,
      },
    ),
  ],
};

// Listed parent first: a subfolder's setting (config/rules) comes later and replaces its parent's there.
const wallConfigs = Object.entries(walls).map(([name, patterns]) => ({
  name: `roundhouse/walls/${name}`,
  files: [`${name}/**/*.ts`],
  rules: { 'no-restricted-imports': ['error', { patterns }] },
}));

// ---------------------------------------------------------------------------------------------------------------
// A `return` in a test's own body ends it early, and jest counts it passed: the rest of its assertions never ran.
// A case that does not apply somewhere is not registered there, or skipped (CI fails on a skip test/skip-allowlist.json
// does not allow); a case that differs takes an if/else. Returns inside callbacks the test defines are theirs.
// ---------------------------------------------------------------------------------------------------------------
const TEST_FUNCTIONS = new Set(['test', 'it']);
/** `test(…)`, `it.only(…)`, `test.concurrent(…)`, `test.each(table)(…)`. */
const isTestCall = (call) => {
  let callee = call.callee.type === 'CallExpression' ? call.callee.callee : call.callee;
  while (callee.type === 'MemberExpression') callee = callee.object;
  return callee.type === 'Identifier' && TEST_FUNCTIONS.has(callee.name);
};
const FUNCTIONS = new Set(['FunctionExpression', 'ArrowFunctionExpression', 'FunctionDeclaration']);
const noReturnInTest = {
  meta: {
    type: 'problem',
    messages: {
      early:
        'A return in a test body ends the test early and it still passes: register the case only where it applies, skip it, or use if/else.',
    },
    schema: [],
  },
  create: (context) => ({
    ReturnStatement(node) {
      const fn = context.sourceCode.getAncestors(node).findLast((a) => FUNCTIONS.has(a.type));
      const call = fn?.parent;
      if (call?.type === 'CallExpression' && call.arguments.includes(fn) && isTestCall(call)) context.report({ node, messageId: 'early' });
    },
  }),
};

/** The repository's own rules. */
const roundhouse = { rules: { 'no-return-in-test': noReturnInTest, 'no-import-cycles': noImportCycles } };

export default defineConfig(
  globalIgnores(['dist/', 'node_modules/', '.roundhouse/', 'coverage/', 'test/fixtures/'], 'roundhouse/ignores'),
  js.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    name: 'roundhouse/typescript',
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: root },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    plugins: { roundhouse },
    rules: {
      // Modules of ours that import each other (types included) cannot be read, moved or split apart on their own.
      'roundhouse/no-import-cycles': 'error',
      // The bugs this linter is here for: a promise nobody awaits (its rejection is lost, its work races the next
      // step) and a promise where a callback's void return is expected. Mark a deliberate fire-and-forget `void`.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      // `let worker; const draining = () => worker...; worker = await create(...)`: the closure reads it first.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // Style noise for this codebase (hundreds of hits, no bugs among them): JSON.parse results and jest matchers are
      // `any` by nature; `xs[i]!` is its habit (ready for noUncheckedIndexedAccess); async methods that do not await
      // implement async interfaces (PayloadCodec, TrainingProvider); activities are objects of plain functions,
      // handed around unbound by Temporal's own convention.
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unnecessary-type-assertion': 'off',
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/unbound-method': 'off',
    },
  },
  {
    // The CLI loads a command's dependencies when the command runs (cli/lazy.ts: `lazy(() => require(m) as typeof M)`,
    // beside an `import type * as M from m` that the walls above check), so its start stays fast.
    name: 'roundhouse/cli-lazy-modules',
    files: ['cli/**/*.ts'],
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    name: 'roundhouse/tests-and-benchmarks',
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      'roundhouse/no-return-in-test': 'error',
      // Tests and benchmarks read raw history events by their numeric type, without a runtime dependency on the protos.
      '@typescript-eslint/no-unsafe-enum-comparison': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
    },
  },
  {
    name: 'roundhouse/javascript',
    files: ['**/*.js', '**/*.cjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { sourceType: 'commonjs', globals: globals.node },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    name: 'roundhouse/esm-javascript',
    files: ['**/*.mjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
  },
  ...wallConfigs,
);
