// Lints the snippets given on stdin (`[{ filePath, code }]`, paths relative to the repository) with the project's own
// eslint.config.mjs, and prints each one's messages as JSON. Without type information: the import walls need none.
// A child process, because ESLint loads its config with import(), which jest's module sandbox does not provide.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import tseslint from 'typescript-eslint';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const snippets = JSON.parse(fs.readFileSync(0, 'utf8'));
const eslint = new ESLint({ cwd: root, overrideConfig: tseslint.configs.disableTypeChecked });
const results = [];
for (const { filePath, code } of snippets) {
  const [result] = await eslint.lintText(code, { filePath: path.join(root, filePath) });
  results.push(result?.messages ?? []);
}
process.stdout.write(JSON.stringify(results));
