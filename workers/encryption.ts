import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { DataConverter, Payload, PayloadCodec } from '@temporalio/common';
import type { EncryptionKeyring } from '../config/io/worker-env';

export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const CIPHER = 'AES256GCM';
const IV_BYTES = 12;
const TAG_BYTES = 16;

const utf8 = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array | null | undefined) => (b ? Buffer.from(b).toString('utf8') : '');

export class UnknownEncryptionKeyError extends Error {
  readonly code = 'UNKNOWN_ENCRYPTION_KEY';
  constructor(readonly keyId: string) {
    super(`payload was encrypted with key '${keyId}', which this process does not have (add it to ROUNDHOUSE_ENCRYPTION_KEYS)`);
  }
}

/** The original payload, serialised before encryption: metadata and data, each base64. */
function serialise(payload: Payload): Buffer {
  const metadata = Object.fromEntries(
    Object.entries(payload.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v ?? new Uint8Array()).toString('base64')]),
  );
  return Buffer.from(JSON.stringify({ metadata, data: Buffer.from(payload.data ?? new Uint8Array()).toString('base64') }));
}

function deserialise(bytes: Buffer): Payload {
  const parsed = JSON.parse(bytes.toString('utf8')) as { metadata: Record<string, string>; data: string };
  return {
    metadata: Object.fromEntries(Object.entries(parsed.metadata).map(([k, v]) => [k, new Uint8Array(Buffer.from(v, 'base64'))])),
    data: new Uint8Array(Buffer.from(parsed.data, 'base64')),
  };
}

/**
 * AES-256-GCM payload codec. Every payload is encrypted with the keyring's current key and names that key's id in
 * its metadata; decoding picks the key by that id, so rotating keys is adding a new current key and keeping the
 * old ones for reading. The key id is authenticated with the ciphertext. Payloads that were never encrypted (a
 * workflow started before encryption was turned on) pass through decoding unchanged.
 */
export class AesGcmPayloadCodec implements PayloadCodec {
  constructor(private readonly keyring: EncryptionKeyring) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    const keyId = this.keyring.currentKeyId;
    const key = this.keyring.keys.get(keyId)!;
    return payloads.map((payload) => {
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      cipher.setAAD(Buffer.from(keyId));
      const body = Buffer.concat([cipher.update(serialise(payload)), cipher.final()]);
      return {
        metadata: { encoding: utf8(ENCRYPTED_ENCODING), 'encryption-cipher': utf8(CIPHER), 'encryption-key-id': utf8(keyId) },
        data: new Uint8Array(Buffer.concat([iv, body, cipher.getAuthTag()])),
      };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      if (text(payload.metadata?.encoding) !== ENCRYPTED_ENCODING) return payload;
      const keyId = text(payload.metadata?.['encryption-key-id']);
      const key = this.keyring.keys.get(keyId);
      if (!key) throw new UnknownEncryptionKeyError(keyId);
      const data = Buffer.from(payload.data ?? new Uint8Array());
      const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
      decipher.setAAD(Buffer.from(keyId));
      decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
      return deserialise(Buffer.concat([decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)), decipher.final()]));
    });
  }
}

/** The data converter every client and worker of one deployment must share: the codec when keys are configured. */
export function dataConverterFor(settings: { encryption?: EncryptionKeyring }): DataConverter | undefined {
  return settings.encryption ? { payloadCodecs: [new AesGcmPayloadCodec(settings.encryption)] } : undefined;
}
