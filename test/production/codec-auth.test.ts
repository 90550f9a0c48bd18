import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { defaultPayloadConverter } from '@temporalio/common';
import { codecAuthenticator } from '../../workers/codec-auth';
import { startCodecServer, type RunningCodecServer } from '../../workers/codec-server';
import { parseEncryptionKeys } from '../../config/io/worker-env';
import { AesGcmPayloadCodec } from '../../workers/encryption';

// The codec server decrypts whatever it is sent, so it answers only authenticated callers: a shared bearer token,
// or a JWT signed by a key of the configured JWKS (what the Temporal Web UI forwards), over real HTTP on loopback.

const bin = path.resolve(__dirname, '../../bin/roundhouse.js');
const keyring = parseEncryptionKeys(`k1=${crypto.randomBytes(32).toString('base64')}`, 'ROUNDHOUSE_ENCRYPTION_KEYS');
const codec = new AesGcmPayloadCodec(keyring);
const TOKEN = crypto.randomBytes(24).toString('hex');

const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const ec = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
const stranger = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
let jwks: http.Server;
let jwksUrl: string;
let jwksHits = 0;
let server: RunningCodecServer;
const refused: string[] = [];

beforeAll(async () => {
  jwks = http.createServer((_req, res) => {
    jwksHits += 1;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        keys: [
          { ...rsa.publicKey.export({ format: 'jwk' }), kid: 'rsa-1', use: 'sig', alg: 'RS256' },
          { ...ec.publicKey.export({ format: 'jwk' }), kid: 'ec-1', use: 'sig', alg: 'ES256' },
        ],
      }),
    );
  });
  await new Promise<void>((r) => jwks.listen(0, '127.0.0.1', () => r()));
  jwksUrl = `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/.well-known/jwks.json`;
  server = await startCodecServer({
    codec,
    port: 0,
    authenticate: codecAuthenticator({ tokens: [TOKEN], jwt: { jwksUrl, audience: 'temporal-ui', issuer: 'https://idp.test' } }),
    onRefused: (reason) => refused.push(reason),
  });
});

afterAll(async () => {
  await server.close();
  await new Promise<void>((r) => jwks.close(() => r()));
});

function jwt(claims: Record<string, unknown>, options: { key?: crypto.KeyObject; kid?: string; alg?: 'RS256' | 'ES256' } = {}): string {
  const alg = options.alg ?? 'RS256';
  const header = Buffer.from(JSON.stringify({ alg, typ: 'JWT', kid: options.kid ?? (alg === 'ES256' ? 'ec-1' : 'rsa-1') })).toString(
    'base64url',
  );
  const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
  const key = options.key ?? (alg === 'ES256' ? ec.privateKey : rsa.privateKey);
  const signature = crypto.sign('sha256', Buffer.from(`${header}.${body}`), alg === 'ES256' ? { key, dsaEncoding: 'ieee-p1363' } : key);
  return `${header}.${body}.${signature.toString('base64url')}`;
}

const valid = () => ({ sub: 'ada@example.com', aud: 'temporal-ui', iss: 'https://idp.test', exp: Math.floor(Date.now() / 1000) + 300 });

async function decode(authorization?: string): Promise<{ status: number; body: any }> {
  const [payload] = await codec.encode([defaultPayloadConverter.toPayload({ secret: 'the round input' })]);
  const res = await fetch(`${server.url}/decode`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) },
    body: JSON.stringify({
      payloads: [
        {
          metadata: Object.fromEntries(Object.entries(payload!.metadata!).map(([k, v]) => [k, Buffer.from(v!).toString('base64')])),
          data: Buffer.from(payload!.data!).toString('base64'),
        },
      ],
    }),
  });
  return { status: res.status, body: await res.json() };
}

function plaintext(body: any): unknown {
  return JSON.parse(Buffer.from(body.payloads[0].data as string, 'base64').toString('utf8'));
}

test('without a credential, or with a wrong one, nothing is decoded: 401 with WWW-Authenticate, and the refusal is reported', async () => {
  for (const authorization of [undefined, 'Bearer wrong-token-of-enough-length', `Basic ${TOKEN}`, TOKEN]) {
    const { status, body } = await decode(authorization);
    expect(status).toBe(401);
    expect(JSON.stringify(body)).not.toContain('the round input');
  }
  const res = await fetch(`${server.url}/decode`, { method: 'POST', body: '{}' });
  expect(res.headers.get('www-authenticate')).toBe('Bearer');
  expect(refused.length).toBeGreaterThanOrEqual(5);
  expect(refused.join('\n')).not.toContain(TOKEN);
});

test('the shared token decodes', async () => {
  const { status, body } = await decode(`Bearer ${TOKEN}`);
  expect(status).toBe(200);
  expect(plaintext(body)).toEqual({ secret: 'the round input' });
});

test('a JWT the Web UI forwards decodes when a JWKS key signed it (RS256 and ES256) and its audience, issuer and expiry hold', async () => {
  expect((await decode(`Bearer ${jwt(valid())}`)).status).toBe(200);
  expect((await decode(`Bearer ${jwt(valid(), { alg: 'ES256' })}`)).status).toBe(200);
  const rejected: Record<string, string> = {
    expired: jwt({ ...valid(), exp: Math.floor(Date.now() / 1000) - 120 }),
    'no expiry': jwt({ ...valid(), exp: undefined }),
    'other audience': jwt({ ...valid(), aud: 'someone-else' }),
    'other issuer': jwt({ ...valid(), iss: 'https://evil.test' }),
    'signed by another key under a known kid': jwt(valid(), { key: stranger.privateKey }),
    'unknown kid': jwt(valid(), { kid: 'rsa-2' }),
    'alg none': `${Buffer.from('{"alg":"none","kid":"rsa-1"}').toString('base64url')}.${Buffer.from(JSON.stringify(valid())).toString('base64url')}.`,
    'tampered claims': (() => {
      const [h, , s] = jwt(valid()).split('.');
      return `${h}.${Buffer.from(JSON.stringify({ ...valid(), sub: 'root' })).toString('base64url')}.${s}`;
    })(),
  };
  for (const [what, token] of Object.entries(rejected)) {
    const { status } = await decode(`Bearer ${token}`);
    expect({ what, status }).toEqual({ what, status: 401 });
  }
  expect(jwksHits).toBeGreaterThanOrEqual(1);
});

test('`roundhouse codec-server` refuses to start without authentication, naming the setting (exit 2)', async () => {
  const state = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-codec-'));
  const run = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [bin, 'codec-server', '--port', '0'], {
      env: {
        ...process.env,
        ROUNDHOUSE_STATE_DIR: state,
        ROUNDHOUSE_ENCRYPTION_KEYS: `k1=${crypto.randomBytes(32).toString('base64')}`,
        ROUNDHOUSE_CODEC_TOKEN: '',
      },
      timeout: 60_000,
    });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stderr }));
  });
  expect(run.code).toBe(2);
  expect(run.stderr).toMatch(/ROUNDHOUSE_CODEC_TOKEN: .*needs authentication/);
});
