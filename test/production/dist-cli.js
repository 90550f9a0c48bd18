'use strict';
// The compiled CLI (`npm run build` → dist/), run as the Docker image runs it: no TypeScript, no tsx.
require('../../dist/cli/main.js')
  .main(process.argv)
  .then((code) => {
    process.exitCode = code;
  });
