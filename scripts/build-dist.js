#!/usr/bin/env node
'use strict';
// The second half of `npm run build` (after tsc): copy the runtime assets the compiled code reads, and bundle the
// workflows once into dist/workflow-bundle.js, which workers load instead of running webpack at start-up.
const fs = require('node:fs');
const path = require('node:path');
const { bundleWorkflowCode } = require('@temporalio/worker');

const root = path.join(__dirname, '..');
const dist = path.join(root, 'dist');

async function main() {
  const compiled = path.join(dist, 'workflows', 'index.js');
  if (!fs.existsSync(compiled)) throw new Error(`${compiled} is missing: run tsc -p tsconfig.build.json first`);
  // The emulator's own model files (tokenizer, chat template), read by the compiled emulator/tokenizer.js and config/io/tokenizer.js.
  fs.cpSync(path.join(root, 'emulator', 'models'), path.join(dist, 'emulator', 'models'), { recursive: true });
  // Tinker's protobuf schema, read by the compiled providers/tinker/wire.js.
  fs.cpSync(path.join(root, 'providers', 'tinker', 'tinker_public.proto'), path.join(dist, 'providers', 'tinker', 'tinker_public.proto'));

  const started = Date.now();
  const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn: console.warn, error: console.error };
  const { code } = await bundleWorkflowCode({ workflowsPath: compiled, logger: quiet });
  const bundle = path.join(dist, 'workflow-bundle.js');
  const tmp = `${bundle}.tmp`;
  fs.writeFileSync(tmp, code);
  fs.renameSync(tmp, bundle);
  require('./dist-state').stampDist();
  process.stdout.write(`wrote ${path.relative(root, bundle)} (${(code.length / 1024).toFixed(0)} KiB) in ${Date.now() - started} ms\n`);
}

main().catch((err) => {
  process.stderr.write(`build failed: ${err.stack ?? err}\n`);
  process.exit(1);
});
