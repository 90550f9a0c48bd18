import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { maskedForTemporal } from '../../activities/failures';
import { maskSecrets, maskSecretsIn, registerEnvironmentSecrets, registerSecret } from '../../config/io/secrets';

test('every variable named like a secret, and the file a …_FILE variable names, is masked by value wherever it appears', () => {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rh-secret-file-')), 'token');
  fs.writeFileSync(file, 'codec-token-from-a-file\n');
  registerEnvironmentSecrets({
    TINKER_API_KEY: 'tml-unit-0123456789',
    AWS_SECRET_ACCESS_KEY: 'wJalr/XUtnFEMI+K7MDENG',
    MLFLOW_TRACKING_USERNAME: 'alice',
    MLFLOW_TRACKING_PASSWORD: 'mlflow-pass-42',
    JUDGE_API_KEY: 'judge-key-abcdef',
    TEMPORAL_TLS_CLIENT_KEY_DATA: 'pem-private-key-body',
    ROUNDHOUSE_CODEC_TOKEN_FILE: file,
    ROUNDHOUSE_TASK_QUEUE: 'roundhouse-queue', // not a secret: left alone
    SHORT_TOKEN: 'abc', // too short to mask without blanking words
  });
  const text = [
    'tml-unit-0123456789',
    encodeURIComponent('wJalr/XUtnFEMI+K7MDENG'),
    'mlflow-pass-42',
    Buffer.from('alice:mlflow-pass-42').toString('base64'),
    'judge-key-abcdef',
    'pem-private-key-body',
    'codec-token-from-a-file',
    'roundhouse-queue',
    'abc',
  ].join(' ');
  expect(maskSecrets(text)).toBe(`${Array(7).fill('[redacted]').join(' ')} roundhouse-queue abc`);
});

test('a credential header is masked whatever its value: Bearer, Basic, Api-Key, and X-API-Key as a header line or in echoed JSON', () => {
  const echoed = JSON.stringify({ 'x-api-key': 'tml-never-registered', authorization: 'Api-Key bt-never-registered', host: 'h' });
  expect(maskSecrets(`HTTP 500: headers ${echoed}`)).toBe(
    'HTTP 500: headers {"x-api-key":"[redacted]","authorization":"Api-Key [redacted]","host":"h"}',
  );
  expect(maskSecrets(JSON.stringify(`headers ${echoed}`))).not.toMatch(/never-registered/); // escaped once more, in a report
  expect(maskSecrets('X-API-Key: tml-abc123 / Bearer a.b.c / Basic YTpi')).toBe(
    'X-API-Key: [redacted] / Bearer [redacted] / Basic [redacted]',
  );
  expect(maskSecrets('missing or malformed X-API-Key header; expected "tml-…"')).toBe(
    'missing or malformed X-API-Key header; expected "tml-…"',
  );
});

test('values are masked at any depth; numbers, bytes and non-plain objects are kept as they are', () => {
  registerSecret('eyJhbGciOiJIUzI1NiJ9.rotating.jwt', { rotating: true });
  const bytes = new Uint8Array([1, 2, 3]);
  const masked = maskSecretsIn({ step: 3, bytes, nested: [{ message: 'refused eyJhbGciOiJIUzI1NiJ9.rotating.jwt' }] }) as Record<
    string,
    unknown
  >;
  expect(masked).toEqual({ step: 3, bytes, nested: [{ message: 'refused [redacted]' }] });
  expect(masked.bytes).toBe(bytes);
});

test('an error about to become a Temporal failure is masked in its message, stack, details and causes', () => {
  registerSecret('tgp_v1_failure_unit_key');
  const cause = new TypeError('socket closed while sending Authorization: Bearer tgp_v1_failure_unit_key');
  const failure = ApplicationFailure.create({
    type: 'ProviderUnavailable',
    message: 'GET /v1/rl/model-resources/r1: HTTP 500: headers {"authorization":"Bearer tgp_v1_failure_unit_key"}',
    details: [{ path: '/v1/rl/model-resources/r1', echoed: 'tgp_v1_failure_unit_key', status: 500 }],
    cause,
  });
  const masked = maskedForTemporal(failure) as ApplicationFailure;
  expect(masked).toBe(failure); // the same failure, type and retry policy untouched
  const seen = [masked.message, masked.stack, JSON.stringify(masked.details), cause.message, cause.stack].join('\n');
  expect(seen).not.toContain('tgp_v1_failure_unit_key');
  expect(masked.details).toEqual([{ path: '/v1/rl/model-resources/r1', echoed: '[redacted]', status: 500 }]);
  expect(masked.type).toBe('ProviderUnavailable');
});
