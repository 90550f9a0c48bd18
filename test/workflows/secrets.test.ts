import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@temporalio/client';
import { loadWorkerSettings, parseEncryptionKeys } from '../../config/worker-env';
import type { RoundResult } from '../../workflows/round-contract';
import { codecAuthenticator } from '../../workers/codec-auth';
import { startCodecServer } from '../../workers/codec-server';
import { AesGcmPayloadCodec, dataConverterFor, ENCRYPTED_ENCODING } from '../../workers/encryption';
import { resolveTemporalExecutable } from '../../workers/temporal-server';
import { ledger, startTestEmulator } from '../helpers/emulator';
import { ticketRoundInput } from '../helpers/round';
import { connectTestTemporal, uniqueTaskQueue } from '../helpers/temporal';
import { bundleToFile, startWorkerProcess } from '../helpers/worker-process';
import { roundWorkflow } from '../../workflows';

/** A history exported by the real Temporal CLI: `temporal workflow show --output json`. */
function exportedHistory(workflowId: string): { text: string; json: unknown } {
  const settings = loadWorkerSettings();
  const temporalCli = resolveTemporalExecutable(settings).path!;
  const text = execFileSync(
    temporalCli,
    [
      'workflow',
      'show',
      '--workflow-id',
      workflowId,
      '--output',
      'json',
      '--address',
      settings.address!,
      '--namespace',
      settings.namespace,
    ],
    {
      encoding: 'utf8',
      timeout: 30_000,
    },
  );
  return { text, json: JSON.parse(text) };
}

/** The export's text plus every payload's data and metadata base64-decoded: where a plaintext could hide. */
function readableForms(exported: { text: string; json: unknown }): string {
  const decoded: string[] = [exported.text];
  const walk = (node: unknown, key?: string): void => {
    if (typeof node === 'string' && (key === 'data' || key === 'metadata-value'))
      decoded.push(Buffer.from(node, 'base64').toString('latin1'));
    else if (Array.isArray(node)) node.forEach((n) => walk(n));
    else if (node && typeof node === 'object') {
      for (const [k, v] of Object.entries(node)) walk(v, key === 'metadata' ? 'metadata-value' : k);
    }
  };
  walk(exported.json);
  return decoded.join('\n');
}

/** Every payload object (`{metadata, data}`) in an export. */
function payloadsIn(
  node: unknown,
  out: { metadata: Record<string, string>; data?: string }[] = [],
): { metadata: Record<string, string>; data?: string }[] {
  if (Array.isArray(node)) node.forEach((n) => payloadsIn(n, out));
  else if (node && typeof node === 'object') {
    const o = node as Record<string, unknown>;
    // The SDK core writes its patch markers' details (the patch id) as plain JSON, outside the payload codec.
    if (o.markerName === 'core_patch') return out;
    if (o.metadata && typeof o.metadata === 'object' && 'encoding' in (o.metadata as object))
      out.push(o as { metadata: Record<string, string>; data?: string });
    // Search attributes are indexed by the server, so no codec touches them: the SDK's patches upsert
    // `TemporalChangeVersion` (code-version names such as 'pause-interrupts-segments'); no data of ours is in them.
    else Object.entries(o).forEach(([k, v]) => k !== 'searchAttributes' && payloadsIn(v, out));
  }
  return out;
}

/** A real `roundhouse worker` logging at debug level, with the given secrets in its environment. */
async function startDebugWorker(taskQueue: string, env: Record<string, string>) {
  return startWorkerProcess({
    TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
    ROUNDHOUSE_TASK_QUEUE: taskQueue,
    ROUNDHOUSE_WORKFLOW_BUNDLE: await bundleToFile(),
    ROUNDHOUSE_STATE_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'rh-secrets-')),
    ROUNDHOUSE_LOG_LEVEL: 'debug',
    ...env,
  });
}

test('an API key from the worker environment reaches the provider but never a workflow history or a log line', async () => {
  const secret = `tgp_secret_${Math.random().toString(36).slice(2)}${Date.now()}`;
  const temporal = await connectTestTemporal();
  const emulator = await startTestEmulator();
  const taskQueue = uniqueTaskQueue('secrets');
  const worker = await startDebugWorker(taskQueue, { TOGETHER_API_KEY: secret });
  try {
    await worker.ready;
    const input = ticketRoundInput({ baseUrl: emulator.url, campaignId: `secrets-${taskQueue}`, trainRows: 16, evalRows: 4 });
    input.spec.provider.kind = 'together'; // a real provider kind: the worker must use TOGETHER_API_KEY
    const workflowId = `round-${taskQueue}`;
    const result: RoundResult = await temporal.client.workflow.execute(roundWorkflow, { taskQueue, workflowId, args: [input] });
    expect(result.status).toBe('completed');

    // The key was used: the emulator derived the resource's owner from it.
    const { createHash } = await import('node:crypto');
    const owner = `user-${createHash('sha256').update(secret).digest('hex').slice(0, 10)}`;
    const l = await (await fetch(`${emulator.url}/_emulator/ledger`)).json();
    expect((l as { resources: { owner: string }[] }).resources.map((r) => r.owner)).toContain(owner);

    const history = JSON.stringify(await temporal.client.workflow.getHandle(workflowId).fetchHistory());
    expect(history.length).toBeGreaterThan(1000);
    expect(history).not.toContain(secret);
    const exported = readableForms(exportedHistory(workflowId));
    expect(exported).toContain(input.data.train); // encryption off: payloads are readable JSON…
    expect(exported).not.toContain(secret); // …and still carry no key
    const report = fs.readFileSync(result.reportPath, 'utf8');
    expect(report).not.toContain(secret);
    expect(worker.output().length).toBeGreaterThan(1000); // debug logs were written…
    expect(worker.output()).not.toContain(secret); // …without the key
  } finally {
    await worker.stop();
    await emulator.close();
    await temporal.close();
  }
});

test('with payload encryption on, a history exported by the Temporal CLI has no plaintext prompt, answer, id or API key; the codec server reads it back', async () => {
  const secret = `tgp_secret_${randomBytes(12).toString('hex')}`;
  const k1 = randomBytes(32).toString('base64');
  const k2 = randomBytes(32).toString('base64');
  const keys = `k2=${k2},k1=${k1}`; // rotated: k2 encrypts, k1 still decrypts
  const keyring = parseEncryptionKeys(keys, 'ROUNDHOUSE_ENCRYPTION_KEYS');
  const temporal = await connectTestTemporal();
  const client = new Client({
    connection: temporal.client.connection,
    namespace: temporal.settings.namespace,
    dataConverter: dataConverterFor({ encryption: keyring }),
  });
  const emulator = await startTestEmulator();
  const taskQueue = uniqueTaskQueue('secrets-encrypted');
  const worker = await startDebugWorker(taskQueue, { ROUNDHOUSE_ENCRYPTION_KEYS: keys, TOGETHER_API_KEY: secret });
  const codecToken = randomBytes(24).toString('hex');
  const codecServer = await startCodecServer({
    codec: new AesGcmPayloadCodec(keyring),
    port: 0,
    authenticate: codecAuthenticator({ tokens: [codecToken] }),
  });
  try {
    await worker.ready;
    const campaignId = `enc-campaign-${randomBytes(6).toString('hex')}`;
    const input = ticketRoundInput({ baseUrl: emulator.url, campaignId, trainRows: 16, evalRows: 4 });
    input.spec.provider.kind = 'together';
    const workflowId = `round-${taskQueue}`;
    const result: RoundResult = await client.workflow.execute(roundWorkflow, { taskQueue, workflowId, args: [input] });
    expect(result.status).toBe('completed');
    const owner = `user-${createHash('sha256').update(secret).digest('hex').slice(0, 10)}`;
    const resources = (await ledger(emulator)).resources;
    expect(resources.map((r) => r.owner)).toContain(owner); // the key was used

    const exported = exportedHistory(workflowId);
    const payloads = payloadsIn(exported.json);
    expect(payloads.length).toBeGreaterThan(20);
    for (const p of payloads) expect(Buffer.from(p.metadata.encoding!, 'base64').toString()).toBe(ENCRYPTED_ENCODING);
    const readable = readableForms(exported);
    const rows = [input.data.train, input.data.eval].flatMap((f) =>
      fs
        .readFileSync(f, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { prompt: string; answer: string }),
    );
    const plaintexts = [
      secret,
      campaignId,
      input.data.train,
      input.data.eval,
      resources[0]!.id,
      result.trainingCheckpointId!,
      ...rows.slice(0, 8).map((r) => r.prompt),
      ...new Set(rows.map((r) => `"${r.answer}"`)),
    ];
    expect(plaintexts.every((plain) => typeof plain === 'string' && plain.length >= 6)).toBe(true);
    expect(plaintexts.concat(k1, k2).filter((plain) => readable.includes(plain))).toEqual([]);

    // The codec server (what the Web UI calls) turns the exported input back into the round's input.
    const started = payloads[0]!;
    const decode = (headers: Record<string, string>) =>
      fetch(`${codecServer.url}/decode`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ payloads: [started] }),
      });
    expect((await decode({})).status).toBe(401); // it decrypts only for an authenticated caller
    const res = await decode({ authorization: `Bearer ${codecToken}` });
    const [decoded] = ((await res.json()) as { payloads: { data: string }[] }).payloads;
    expect(JSON.parse(Buffer.from(decoded!.data, 'base64').toString('utf8'))).toMatchObject({
      campaignId,
      data: { train: input.data.train },
    });

    expect(worker.output().length).toBeGreaterThan(1000);
    for (const plain of [secret, k1, k2]) expect(worker.output()).not.toContain(plain);
  } finally {
    await codecServer.close();
    await worker.stop();
    await emulator.close();
    await temporal.close();
  }
});
