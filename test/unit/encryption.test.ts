import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { ConfigError } from '../../config/rules/errors';
import { loadWorkerSettings, parseEncryptionKeys } from '../../config/io/worker-env';
import { AesGcmPayloadCodec, ENCRYPTED_ENCODING, UnknownEncryptionKeyError } from '../../workers/encryption';

const b64 = () => randomBytes(32).toString('base64');
const payload = (value: unknown): Payload => defaultPayloadConverter.toPayload(value)!;
const value = (p: Payload) => defaultPayloadConverter.fromPayload(p);
const text = (p: Payload) => Buffer.from(p.data!).toString('latin1') + JSON.stringify(p.metadata);

test('payloads are encrypted with the current key id and decrypted back exactly; the plaintext is nowhere in them', async () => {
  const codec = new AesGcmPayloadCodec(parseEncryptionKeys(`k1=${b64()}`, 'TEST'));
  const original = payload({ prompt: 'My invoice is wrong', answer: 'billing', id: 'campaign-42' });
  const [encrypted] = await codec.encode([original]);
  expect(Buffer.from(encrypted!.metadata!.encoding!).toString()).toBe(ENCRYPTED_ENCODING);
  expect(Buffer.from(encrypted!.metadata!['encryption-key-id']!).toString()).toBe('k1');
  for (const plain of ['invoice', 'billing', 'campaign-42', 'json/plain']) expect(text(encrypted!)).not.toContain(plain);
  const [again] = await codec.encode([original]);
  expect(Buffer.from(again!.data!).equals(Buffer.from(encrypted!.data!))).toBe(false); // a fresh IV each time
  expect(value((await codec.decode([encrypted!]))[0]!)).toEqual({ prompt: 'My invoice is wrong', answer: 'billing', id: 'campaign-42' });
});

test('key rotation: a new current key encrypts, old keys still decrypt by id, a retired key is named when missing', async () => {
  const k1 = b64();
  const k2 = b64();
  const before = new AesGcmPayloadCodec(parseEncryptionKeys(`k1=${k1}`, 'TEST'));
  const rotated = new AesGcmPayloadCodec(parseEncryptionKeys(`k2=${k2}\nk1=${k1}`, 'TEST'));
  const retired = new AesGcmPayloadCodec(parseEncryptionKeys(`k2=${k2}`, 'TEST'));
  const [old] = await before.encode([payload('from before the rotation')]);
  const [fresh] = await rotated.encode([payload('after')]);
  expect(Buffer.from(fresh!.metadata!['encryption-key-id']!).toString()).toBe('k2');
  expect(value((await rotated.decode([old!]))[0]!)).toBe('from before the rotation');
  expect(value((await retired.decode([fresh!]))[0]!)).toBe('after');
  await expect(retired.decode([old!])).rejects.toThrow(UnknownEncryptionKeyError);
  await expect(retired.decode([old!])).rejects.toThrow(/'k1'/);
  // ROUNDHOUSE_ENCRYPTION_KEY_ID picks the current key among several
  expect(parseEncryptionKeys(`k2=${k2},k1=${k1}`, 'TEST', 'k1').currentKeyId).toBe('k1');
});

test('tampering is detected: changed ciphertext or a relabelled key id fails to decrypt; plain payloads pass through', async () => {
  const k = b64();
  const codec = new AesGcmPayloadCodec(parseEncryptionKeys(`a=${k},b=${k}`, 'TEST'));
  const [encrypted] = await codec.encode([payload('secret')]);
  const flipped = Buffer.from(encrypted!.data!);
  flipped[20] = flipped[20]! ^ 1;
  await expect(codec.decode([{ ...encrypted!, data: new Uint8Array(flipped) }])).rejects.toThrow();
  const relabelled = { ...encrypted!, metadata: { ...encrypted!.metadata, 'encryption-key-id': new TextEncoder().encode('b') } };
  await expect(codec.decode([relabelled])).rejects.toThrow(); // the key id is authenticated
  const plain = payload({ started: 'before encryption was on' });
  expect(await codec.decode([plain])).toEqual([plain]);
});

test('the worker environment reads keys from a variable or a file and names the variable of a bad key', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-keys-'));
  const file = path.join(dir, 'keys');
  fs.writeFileSync(file, `# rotated 2026-11\nk2=${randomBytes(32).toString('hex')}\nk1=${b64()}\n`);
  const fromFile = loadWorkerSettings({ ROUNDHOUSE_ENCRYPTION_KEYS_FILE: file });
  expect(fromFile.encryption?.currentKeyId).toBe('k2');
  expect([...fromFile.encryption!.keys.keys()]).toEqual(['k2', 'k1']);
  expect(loadWorkerSettings({}).encryption).toBeUndefined();
  const bad = (env: NodeJS.ProcessEnv) => {
    try {
      loadWorkerSettings(env);
    } catch (err) {
      return err as ConfigError;
    }
    throw new Error('expected a ConfigError');
  };
  expect(bad({ ROUNDHOUSE_ENCRYPTION_KEYS: 'k1=c2hvcnQ=' }).message).toMatch(/ROUNDHOUSE_ENCRYPTION_KEYS.*32 bytes/);
  expect(bad({ ROUNDHOUSE_ENCRYPTION_KEYS: `k1=${b64()}`, ROUNDHOUSE_ENCRYPTION_KEY_ID: 'k9' }).message).toMatch(
    /ROUNDHOUSE_ENCRYPTION_KEY_ID.*k9/,
  );
  expect(bad({ ROUNDHOUSE_ENCRYPTION_KEYS: `k1=${b64()}`, ROUNDHOUSE_ENCRYPTION_KEYS_FILE: file }).message).toMatch(/not both/);
  const secret = b64();
  expect(bad({ ROUNDHOUSE_ENCRYPTION_KEYS: `bad id=${secret}` }).message).not.toContain(secret); // errors never echo a key
});
