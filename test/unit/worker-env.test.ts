import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ConfigError } from '../../config/rules/errors';
import { loadWorkerSettings } from '../../config/io/worker-env';

/** Asserts that the environment is refused with a ConfigError naming `variable`, and returns that error. */
function expectConfigError(env: NodeJS.ProcessEnv, variable: string, problem: RegExp): ConfigError {
  let caught: unknown;
  expect(() => {
    try {
      loadWorkerSettings(env);
    } catch (err) {
      caught = err;
      throw err;
    }
  }).toThrow(ConfigError);
  const error = caught as ConfigError;
  expect(error.where).toBe(variable);
  expect(error.message).toMatch(new RegExp(`^${variable}: `));
  expect(error.message).toMatch(problem);
  return error;
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-env-'));
const certFile = path.join(tmp, 'client.pem');
const keyFile = path.join(tmp, 'client.key');
fs.writeFileSync(certFile, 'CERT');
fs.writeFileSync(keyFile, 'KEY');

describe('worker settings from the environment', () => {
  test('defaults: no address (a dev server is started), namespace default, task queue roundhouse, level info, text logs', () => {
    const s = loadWorkerSettings({});
    expect(s).toMatchObject({ address: undefined, namespace: 'default', taskQueue: 'roundhouse', logLevel: 'info', logFormat: 'text' });
    expect(s.stateDir).toBe(path.resolve('.roundhouse'));
    expect(s.tls).toBeUndefined();
  });

  test('a malformed TEMPORAL_ADDRESS is named with the value and the expected form', () => {
    expectConfigError({ TEMPORAL_ADDRESS: 'localhost' }, 'TEMPORAL_ADDRESS', /host:port.*got 'localhost'/);
    expectConfigError({ TEMPORAL_ADDRESS: 'http://x:7233' }, 'TEMPORAL_ADDRESS', /host:port/);
    expectConfigError({ TEMPORAL_ADDRESS: '127.0.0.1:99999' }, 'TEMPORAL_ADDRESS', /between 1 and 65535/);
  });

  test('a TLS certificate path that does not exist is named', () => {
    expectConfigError(
      { TEMPORAL_ADDRESS: 'ns.tmprl.cloud:7233', TEMPORAL_TLS_CERT_PATH: '/nope/cert.pem', TEMPORAL_TLS_KEY_PATH: keyFile },
      'TEMPORAL_TLS_CERT_PATH',
      /no such file/,
    );
  });

  test('mTLS needs both halves of the pair', () => {
    expectConfigError({ TEMPORAL_ADDRESS: 'a:1', TEMPORAL_TLS_CERT_PATH: certFile }, 'TEMPORAL_TLS_KEY_PATH', /both/);
  });

  test('an unknown log level or format and an invalid namespace are rejected by name', () => {
    expectConfigError({ ROUNDHOUSE_LOG_LEVEL: 'loud' }, 'ROUNDHOUSE_LOG_LEVEL', /one of trace/);
    expectConfigError({ ROUNDHOUSE_LOG_FORMAT: 'pretty' }, 'ROUNDHOUSE_LOG_FORMAT', /one of text, json/);
    expectConfigError({ TEMPORAL_NAMESPACE: 'has space' }, 'TEMPORAL_NAMESPACE', /namespace/);
  });

  test('an API key switches TLS on, needs an address, and is never echoed in an error', () => {
    const s = loadWorkerSettings({ TEMPORAL_ADDRESS: 'ns.acct.tmprl.cloud:7233', TEMPORAL_API_KEY: 'sk-very-secret' });
    expect(s.apiKey).toBe('sk-very-secret');
    expect(s.tls).toEqual({});
    const secret = 'sk-very-secret';
    const refusals = [
      expectConfigError({ TEMPORAL_API_KEY: secret }, 'TEMPORAL_ADDRESS', /required/),
      expectConfigError({ TEMPORAL_API_KEY: secret, TEMPORAL_ADDRESS: 'a:1', TEMPORAL_TLS: 'false' }, 'TEMPORAL_TLS', /needs TLS/),
      expectConfigError({ TEMPORAL_API_KEY: secret, TEMPORAL_API_KEY_FILE: certFile }, 'TEMPORAL_API_KEY_FILE', /not both/),
    ];
    for (const error of refusals) expect(error.message).not.toContain(secret);
    // A bad key is named without its value, where another variable's bad value is quoted (`got 'localhost'`).
    const blank = expectConfigError({ TEMPORAL_API_KEY: ' \t ' }, 'TEMPORAL_API_KEY', /too small/i);
    expect(blank.message).not.toContain('got');
  });

  test('an API key file is read and trimmed; mTLS files are loaded', () => {
    const keyPath = path.join(tmp, 'api.key');
    fs.writeFileSync(keyPath, 'from-file-key\n');
    const s = loadWorkerSettings({
      TEMPORAL_ADDRESS: 'a.b:7233',
      TEMPORAL_API_KEY_FILE: keyPath,
      TEMPORAL_TLS_CERT_PATH: certFile,
      TEMPORAL_TLS_KEY_PATH: keyFile,
      TEMPORAL_TLS_SERVER_NAME: 'a.b',
    });
    expect(s.apiKey).toBe('from-file-key');
    expect(s.tls?.serverName).toBe('a.b');
    expect(s.tls?.clientCertPair?.crt.toString()).toBe('CERT');
  });

  test("Temporal's standard TLS names are read, and win over the older names when both are set", () => {
    const files = Object.fromEntries(
      ['cert', 'key', 'ca', 'old-cert', 'old-key', 'old-ca'].map((name) => {
        const file = path.join(tmp, `${name}.pem`);
        fs.writeFileSync(file, name.toUpperCase());
        return [name, file];
      }),
    );
    const standard = {
      TEMPORAL_ADDRESS: 'a:1',
      TEMPORAL_TLS_CLIENT_CERT_PATH: files.cert,
      TEMPORAL_TLS_CLIENT_KEY_PATH: files.key,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: files.ca,
      TEMPORAL_TLS_SERVER_NAME: 'temporal.internal',
    };
    const older = {
      TEMPORAL_TLS_CERT_PATH: files['old-cert'],
      TEMPORAL_TLS_KEY_PATH: files['old-key'],
      TEMPORAL_TLS_CA_PATH: files['old-ca'],
    };
    const read = (env: NodeJS.ProcessEnv): string[] => {
      const tls = loadWorkerSettings(env).tls;
      return [tls?.clientCertPair?.crt, tls?.clientCertPair?.key, tls?.serverRootCACertificate].map(String);
    };
    expect(read(standard)).toEqual(['CERT', 'KEY', 'CA']);
    expect(read({ TEMPORAL_ADDRESS: 'a:1', ...older })).toEqual(['OLD-CERT', 'OLD-KEY', 'OLD-CA']);
    expect(read({ ...older, ...standard })).toEqual(['CERT', 'KEY', 'CA']);
    // The older name is not even checked when the standard one is set.
    expect(read({ ...standard, TEMPORAL_TLS_CA_PATH: '/nope/ca.pem' })).toEqual(['CERT', 'KEY', 'CA']);
    const pem = { TEMPORAL_TLS_CLIENT_CERT_DATA: 'PEM-CERT', TEMPORAL_TLS_CLIENT_KEY_DATA: 'PEM-KEY' };
    expect(read({ TEMPORAL_ADDRESS: 'a:1', ...pem }).slice(0, 2)).toEqual(['PEM-CERT', 'PEM-KEY']);
    expect(loadWorkerSettings({ ...standard, TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: 'false' }).tls?.serverName).toBe('temporal.internal');
  });

  test('a TLS setting that cannot be honoured is refused by name', () => {
    const address = { TEMPORAL_ADDRESS: 'a:1' };
    expectConfigError(
      { ...address, TEMPORAL_TLS_CLIENT_CERT_PATH: certFile },
      'TEMPORAL_TLS_CLIENT_KEY_PATH',
      /both TEMPORAL_TLS_CLIENT_CERT_PATH/,
    );
    expectConfigError({ ...address, TEMPORAL_TLS_CLIENT_KEY_DATA: 'KEY' }, 'TEMPORAL_TLS_CLIENT_CERT_DATA', /both/);
    expectConfigError(
      { TEMPORAL_TLS_CA_PATH: certFile, TEMPORAL_TLS_SERVER_CA_CERT_DATA: 'CA' },
      'TEMPORAL_TLS_SERVER_CA_CERT_DATA',
      /set either TEMPORAL_TLS_CA_PATH or TEMPORAL_TLS_SERVER_CA_CERT_DATA, not both/,
    );
    expectConfigError(
      { ...address, TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: 'true' },
      'TEMPORAL_TLS_DISABLE_HOST_VERIFICATION',
      /always verifies the server's certificate/,
    );
  });
});
