// An ESLint rule: no import cycles among the repository's own modules. Type imports count too: a cycle of types is
// still two modules that cannot be read, moved or split apart, and it is where a runtime cycle grows next.
// Every relative `import`/`export … from`, `import x = require()`, `require()` and `import()` is an edge; a module
// in a cycle is reported at each import that leads back to it, with the path that does.
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

const EXTENSIONS = ['.ts', '.mts', '.cts', '.js', '.mjs', '.cjs'];

/** Parsed imports by file, kept while the file is unchanged (one lint run, or an editor's long-lived server). */
const parsed = new Map();

/** The repository file a relative specifier names, or undefined (packages, builtins, other files). */
function resolve(from, specifier) {
  if (!specifier.startsWith('.')) return undefined;
  const base = path.resolve(path.dirname(from), specifier);
  const candidates = [base, ...EXTENSIONS.map((e) => base + e), ...EXTENSIONS.map((e) => path.join(base, `index${e}`))];
  return candidates.find((c) => EXTENSIONS.includes(path.extname(c)) && fs.statSync(c, { throwIfNoEntry: false })?.isFile());
}

/** The repository files a module's source imports: [{ target, specifier }]. */
function importsIn(file, text) {
  return ts.preProcessFile(text, true, true).importedFiles.flatMap(({ fileName }) => {
    const target = resolve(file, fileName);
    return target ? [{ target, specifier: fileName }] : [];
  });
}

/** The repository files a file on disk imports. */
function importsOf(file) {
  const stat = fs.statSync(file, { throwIfNoEntry: false });
  if (!stat) return [];
  const held = parsed.get(file);
  if (held && held.mtimeMs === stat.mtimeMs) return held.imports;
  const imports = importsIn(file, fs.readFileSync(file, 'utf8'));
  parsed.set(file, { mtimeMs: stat.mtimeMs, imports });
  return imports;
}

/** A shortest import path from `from` to `to` (both included), or undefined when there is none. */
function pathBetween(from, to) {
  const previous = new Map([[from, undefined]]);
  const queue = [from];
  while (queue.length) {
    const file = queue.shift();
    if (file === to) {
      const out = [];
      for (let f = to; f !== undefined; f = previous.get(f)) out.unshift(f);
      return out;
    }
    for (const { target } of importsOf(file)) {
      if (previous.has(target)) continue;
      previous.set(target, file);
      queue.push(target);
    }
  }
  return undefined;
}

export const noImportCycles = {
  meta: {
    type: 'problem',
    messages: {
      cycle: 'Import cycle: {{cycle}}. Move what both sides need into a module of its own (a contract, a pure rule) that imports neither.',
    },
    schema: [],
  },
  create(context) {
    const file = context.filename;
    const root = context.cwd;
    const relative = (f) => path.relative(root, f);
    return {
      Program(program) {
        const nodes = program.body;
        // The file as linted (an editor's unsaved text); the modules it reaches as they are on disk.
        for (const { target, specifier } of importsIn(file, context.sourceCode.text)) {
          const back = pathBetween(target, file);
          if (!back) continue;
          const node =
            nodes.find(
              (n) =>
                (n.type === 'ImportDeclaration' || n.type === 'ExportNamedDeclaration' || n.type === 'ExportAllDeclaration') &&
                n.source?.value === specifier,
            ) ?? program;
          context.report({ node, messageId: 'cycle', data: { cycle: [file, ...back].map(relative).join(' → ') } });
        }
      },
    };
  },
};
