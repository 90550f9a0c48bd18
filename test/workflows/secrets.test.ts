import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@temporalio/client';
import { loadWorkerSettings, parseEncryptionKeys } from '../../config/io/worker-env';
import type { RoundResult } from '../../workflows/round/contract';
import type { CampaignResult } from '../../workflows/campaign/contract';
import type { EmulatorOptions } from '../../emulator/server';
import { writeTicketData } from '../../examples/support-tickets/generate';
import { distCli } from '../helpers/dist';
import { codecAuthenticator } from '../../workers/codec-auth';
import { startCodecServer } from '../../workers/codec-server';
import { AesGcmPayloadCodec, dataConverterFor, ENCRYPTED_ENCODING } from '../../workers/encryption';
import { resolveTemporalExecutable } from '../../workers/temporal-server';
import { ledger, setFaults, startTestEmulator } from '../helpers/emulator';
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

/** A `roundhouse` command of the compiled CLI, run to its end: its exit code and everything it printed. */
function roundhouse(env: Record<string, string>, ...args: string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [distCli, ...args], { env: { ...process.env, ...env }, timeout: 240_000 });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('close', (code) => resolve({ code, output }));
  });
}

/** Everything Temporal holds of a workflow run as text: its strings, and its payloads' bytes decoded (JSON payloads are UTF-8). */
function textOf(node: unknown, out: string[] = [], seen = new WeakSet<object>()): string[] {
  if (typeof node === 'string') out.push(node);
  else if (node instanceof Uint8Array) out.push(Buffer.from(node).toString('utf8'));
  else if (node && typeof node === 'object' && !seen.has(node)) {
    seen.add(node);
    for (const v of Array.isArray(node) ? node : Object.values(node)) textOf(v, out, seen);
  }
  return out;
}

/** The stack traces of every failure in a history (failed activity attempts, retried attempts' last failures, workflow failures). */
function stackTraces(node: unknown, out: string[] = []): string[] {
  if (Array.isArray(node)) node.forEach((n) => stackTraces(n, out));
  else if (node && typeof node === 'object' && !(node instanceof Uint8Array)) {
    for (const [k, v] of Object.entries(node)) {
      if (k === 'stackTrace' && typeof v === 'string' && v) out.push(v);
      else stackTraces(v, out);
    }
  }
  return out;
}

/** Every file under a directory, as text. */
function filesUnder(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) {
      const file = path.join(entry.parentPath, entry.name);
      out.set(file, fs.readFileSync(file, 'latin1'));
    }
  }
  return out;
}

/**
 * Where a credential could land, as text by place: every run of every workflow on the task queue, read through the
 * client (events with their payloads decoded, failures with their stacks, memos, search attributes), and every file
 * under the state directory (reports, summaries, records). Also the failures' stack traces.
 */
async function temporalAndFiles(
  client: Client,
  taskQueue: string,
  stateDir: string,
): Promise<{ places: Map<string, string>; stacks: string[] }> {
  const places = new Map<string, string>();
  const stacks: string[] = [];
  for await (const { workflowId, runId } of client.workflow.list({ query: `TaskQueue="${taskQueue}"` })) {
    const handle = client.workflow.getHandle(workflowId, runId);
    const history = await handle.fetchHistory();
    const description = await handle.describe();
    stacks.push(...stackTraces(history));
    places.set(
      `history ${workflowId} ${runId}`,
      textOf([history, description.raw, description.memo, description.searchAttributes]).join('\n'),
    );
  }
  for (const [file, text] of filesUnder(stateDir)) places.set(path.relative(stateDir, file), text);
  return { places, stacks };
}

/** Each named secret found in each place, as `<name> in <place>`. */
function leaksOf(secrets: Record<string, string>, places: Map<string, string>): string[] {
  return [...places].flatMap(([place, text]) =>
    Object.entries(secrets)
      .filter(([, value]) => text.includes(value))
      .map(([name]) => `${name} in ${place}`),
  );
}

interface DialectCase {
  kind: 'together' | 'baseten' | 'tinker';
  keyVariable: string;
  key: string;
  emulator?: EmulatorOptions;
  /** A replay-safe request the 5xx (headers echoed) hits 6 times in a row: the client's retries run out, the activity fails once. */
  echo5xx: { method: string; path: string };
  /** Round 2's first create: refused with a 401 that echoes the headers (twice for Tinker: its client retries a 401 with a fresh JWT). */
  echo401: { path: string; max: number };
  /** MLflow's credential: a bearer token, or a username and password (Basic). */
  mlflow: 'token' | 'basic';
}

const random = () => randomBytes(12).toString('hex');
const CASES: DialectCase[] = [
  {
    kind: 'together',
    keyVariable: 'TOGETHER_API_KEY',
    key: `tgp_v1_${random()}`,
    echo5xx: { method: 'GET', path: '^/v1/rl/model-resources/[^/]+$' },
    echo401: { path: '^/v1/rl/model-resources$', max: 1 },
    mlflow: 'token',
  },
  {
    kind: 'baseten',
    keyVariable: 'BASETEN_API_KEY',
    key: `bt${random()}`,
    echo5xx: { method: 'GET', path: '^/v1/loops/runs/[^/]+$' },
    echo401: { path: '^/v1/loops/sessions$', max: 1 },
    mlflow: 'basic',
  },
  {
    kind: 'tinker',
    keyVariable: 'TINKER_API_KEY',
    key: `tml-${random()}`,
    // JWT mode, tokens of 62 s: the client refreshes one within a minute of its expiry, so every 2 s it needs one.
    emulator: { tinkerJwtLifetimeSeconds: 62 },
    // The key itself goes only to auth/token (in X-API-Key): the 5xx echoes it there.
    echo5xx: { method: 'POST', path: '^/api/v1/auth/token$' },
    echo401: { path: '^/api/v1/create_session$', max: 2 },
    mlflow: 'token',
  },
];

/** A campaign of two small rounds on a provider's dialect, served by the emulator at `url`: its spec file. */
function twoRoundCampaign(kind: DialectCase['kind'], url: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-secrets-spec-'));
  writeTicketData(dir, 16, 4);
  const specFile = path.join(dir, 'campaign.yaml');
  fs.writeFileSync(
    specFile,
    `name: secrets-${kind}
provider: { kind: ${kind}, baseUrl: "${url}", model: roundhouse/tiny-chat }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 256, segmentSteps: 1 }
sampling: { maxTokens: 4, temperature: 0 }
evaluation: { scorer: exact }
advanced: { heartbeatTimeoutSeconds: 5 }
rounds: { max: 2, nextData: { policy: all } }
`,
  );
  return specFile;
}

describe.each(CASES)('secrets on $kind', (c) => {
  test(`${c.keyVariable}, MLflow's credential, the S3 secret and every JWT issued reach no log, history or report, though a 5xx, a 401 and MLflow echo them`, async () => {
    const started = Date.now();
    const temporal = await connectTestTemporal();
    const emulator = await startTestEmulator(c.emulator ?? {});
    const taskQueue = uniqueTaskQueue(`secrets-${c.kind}`);
    const campaignId = `secrets-${c.kind}-${taskQueue}`;
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rh-secrets-state-'));
    const secrets: Record<string, string> = {
      [c.keyVariable]: c.key,
      AWS_SECRET_ACCESS_KEY: `aws/${random()}+S3`,
      ...(c.mlflow === 'token'
        ? { MLFLOW_TRACKING_TOKEN: `mlflow-token-${random()}` }
        : { MLFLOW_TRACKING_PASSWORD: `mlflow-password-${random()}` }),
    };
    const env: Record<string, string> = {
      TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
      ROUNDHOUSE_TASK_QUEUE: taskQueue,
      ROUNDHOUSE_STATE_DIR: stateDir,
      ROUNDHOUSE_LOG_LEVEL: 'debug',
      MLFLOW_TRACKING_URI: emulator.url, // the emulator answers MLflow's routes with the echoing 500 below
      ...(c.mlflow === 'basic' ? { MLFLOW_TRACKING_USERNAME: 'roundhouse' } : {}),
      AWS_ACCESS_KEY_ID: 'roundhouse-test',
      ...secrets,
    };
    if (c.mlflow === 'basic') secrets.MLFLOW_BASIC = Buffer.from(`roundhouse:${secrets.MLFLOW_TRACKING_PASSWORD}`).toString('base64');
    await setFaults(emulator, {
      rules: [
        { kind: 'echo-headers', status: 500, method: c.echo5xx.method, path: c.echo5xx.path, max: 6, retryAfterMs: 5 },
        { kind: 'echo-headers', status: 401, method: 'POST', path: c.echo401.path, after: 1, max: c.echo401.max },
        { kind: 'echo-headers', status: 500, path: '^/api/2\\.0/mlflow', max: 100_000, retryAfterMs: 1 },
      ],
    });
    const specFile = twoRoundCampaign(c.kind, emulator.url);
    const worker = startWorkerProcess({ ...env, ROUNDHOUSE_WORKFLOW_BUNDLE: await bundleToFile() });
    try {
      await worker.ready;
      // The CLI starts the campaign and watches it to its end; round 1 trains through the faults, round 2 is refused.
      const run = await roundhouse(env, 'run', specFile, '--id', campaignId, '--wait');
      expect(run.output).toContain(campaignId);
      const result = (await temporal.client.workflow.getHandle(campaignId).result()) as CampaignResult;
      expect(result.rounds.map((r) => r.status)).toEqual(['completed', 'failed']);
      expect(result.rounds[1]!.errorType).toBe('ProviderRejected');
      const status = await roundhouse(env, 'status', campaignId, '--json');
      const report = await roundhouse(env, 'report', campaignId);
      expect(report.code).toBe(0);

      // The faults fired as planned, and the key was used (the emulator derives the account from it).
      const fired = ((await (await fetch(`${emulator.url}/_emulator/faults`)).json()) as { fired: { fired: number }[] }).fired;
      expect(fired.map((f) => f.fired)).toEqual([6, c.echo401.max, expect.any(Number)]);
      expect(fired[2]!.fired).toBeGreaterThan(10);
      const owner = `user-${createHash('sha256').update(c.key).digest('hex').slice(0, 10)}`;
      const l = await ledger(emulator);
      expect(l.resources.map((r) => r.owner)).toContain(owner);
      const jwts =
        c.kind === 'tinker' ? ((await (await fetch(`${emulator.url}/_emulator/tinker/jwts`)).json()) as { jwts: string[] }).jwts : [];
      if (c.kind === 'tinker') expect(jwts.length).toBeGreaterThanOrEqual(2); // the first, and the fresh one the 401 made it fetch

      // Where a credential could land: worker and CLI output, Temporal, the state directory.
      const { places, stacks } = await temporalAndFiles(temporal.client, taskQueue, stateDir);
      for (const [name, text] of [
        ['worker log', worker.output()],
        ['CLI run', run.output],
        ['CLI status', status.output],
        ['CLI report', report.output],
      ] as const)
        places.set(name, text);
      const histories = [...places.keys()].filter((place) => place.startsWith('history '));
      for (const id of [campaignId, `${campaignId}-round-1`, `${campaignId}-round-2`])
        expect(histories.some((h) => h.startsWith(`history ${id} `))).toBe(true);
      const named = { ...secrets, ...Object.fromEntries(jwts.map((jwt, i) => [`JWT #${i + 1}`, jwt])) };
      expect(leaksOf(named, places)).toEqual([]);

      // …and the paths that print credentials were taken: the echoes reached the histories, a failure's stack, the
      // round's report and the worker's MLflow warnings, masked.
      expect(histories.map((h) => places.get(h)).join('\n')).toMatch(/the request's headers were \{[^\n]*\[redacted\]/);
      expect(stacks.some((s) => s.includes("the request's headers were") && s.includes('[redacted]'))).toBe(true);
      expect(places.get(path.join('campaigns', campaignId, 'round-2.json'))).toMatch(/HTTP 401[^\n]*\[redacted\]/);
      expect(places.has(path.join('campaigns', campaignId, 'report.html'))).toBe(true);
      expect(worker.output()).toMatch(/MLflow: could not log[^\n]*the request's headers were[^\n]*\[redacted\]/);
      expect(worker.output()).toMatch(/DEBUG/);
      process.stderr.write(
        `[secrets ${c.kind}] ${places.size} places scanned for ${Object.keys(named).length} secrets (${jwts.length} JWTs) in ${((Date.now() - started) / 1000).toFixed(1)} s\n`,
      );
    } finally {
      await worker.stop();
      await emulator.close();
      await temporal.close();
    }
  });
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
