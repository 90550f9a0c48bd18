import { spawnSync } from 'node:child_process';
import path from 'node:path';

const bin = path.resolve(__dirname, '../../bin/roundhouse.js');

function roundhouse(args: string[], env: Record<string, string>) {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TEMPORAL_')));
  return spawnSync(process.execPath, [bin, ...args], { env: { ...clean, ...env }, encoding: 'utf8', timeout: 60_000 });
}

describe('a bad worker environment is one clear line and exit code 2', () => {
  test('malformed TEMPORAL_ADDRESS', () => {
    const run = roundhouse(['worker'], { TEMPORAL_ADDRESS: 'not-an-address' });
    expect(run.status).toBe(2);
    expect(run.stderr.trim()).toBe("roundhouse: TEMPORAL_ADDRESS: expected host:port, e.g. 127.0.0.1:7233 (got 'not-an-address')");
    expect(run.stderr).not.toMatch(/\n\s+at /); // no stack trace
  });

  test('TLS certificate path that does not exist', () => {
    const run = roundhouse(['worker'], {
      TEMPORAL_ADDRESS: '127.0.0.1:7233',
      TEMPORAL_TLS_CERT_PATH: '/does/not/exist.pem',
      TEMPORAL_TLS_KEY_PATH: '/does/not/exist.key',
    });
    expect(run.status).toBe(2);
    expect(run.stderr.trim().split('\n')).toHaveLength(1);
    expect(run.stderr).toContain('TEMPORAL_TLS_CERT_PATH: no such file');
  });

  test('worker without any address says what to do', () => {
    const run = roundhouse(['worker'], {});
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/TEMPORAL_ADDRESS: is required for `roundhouse worker`/);
  });

  test('an unknown subcommand is a usage error', () => {
    const run = roundhouse(['frobnicate'], {});
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/unknown command/);
  });
});
