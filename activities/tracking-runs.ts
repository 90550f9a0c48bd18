import { Context } from '@temporalio/activity';
import { kindOf } from '../config/rules/round-kinds';
import { describeAssignment, type SweepValue } from '../config/rules/sweep';
import type { CampaignSpec } from '../config/io/spec';
import { credentialsFromEnv, MlflowClient } from '../providers/mlflow/client';
import type { RoundSpec } from '../workflows/round/contract';

/**
 * The MLflow runs a campaign is tracked in, each found again by its tag (`roundhouse.key`), never made twice: the
 * campaign's run; a staged campaign's run per stage under it; a round's run under either. A sweep's round (the
 * campaign's first, with `sweep`) is a run of its own there, with one run per arm nested under it (MLflow's
 * convention for sweeps): an arm's round says so in its spec (`sweepArm`), and every tracking call of the arm (its
 * segments, evaluations and report) finds the same run whichever made it first.
 */

export type Tracked = Pick<CampaignSpec, 'name' | 'tracking'>;

/** What makes a round an arm of a sweep, for the tracker: `spec.sweepArm`, set by the sweep on each arm's spec. */
export interface SweepArmTracking {
  /** The campaign the sweep is a round of (the arm's own keys and records are under `${campaignId}-arm${arm}`). */
  campaignId: string;
  arm: number;
  /** The spec fields the arm sets (config/rules/sweep.ts `SweepArm.assign`). */
  assign: Record<string, SweepValue>;
}

/** A round's spec as the tracker reads it: an arm of a sweep says so, as a staged campaign's round says its stage. */
export type TrackedRoundSpec = RoundSpec & { sweepArm?: SweepArmTracking };

export interface RoundTracking {
  campaignId: string;
  round: number;
  spec: TrackedRoundSpec;
}

export type RunStatus = 'FINISHED' | 'FAILED' | 'KILLED';

/** A round's or campaign's status as a run's, once it has ended (undefined while it runs). */
export const FINAL_STATUS: Record<string, RunStatus> = {
  completed: 'FINISHED',
  failed: 'FAILED',
  stopped: 'KILLED',
  cancelled: 'KILLED',
};

const clients = new Map<string, MlflowClient>();
const runIds = new Map<string, string>();
/** Runs being found or made, by key. */
const making = new Map<string, Promise<string>>();
const experiments = new Map<string, string>();

/** The tracking server and experiment for a spec, or undefined when the campaign is not tracked. */
export function trackingTarget(spec: Tracked, env: NodeJS.ProcessEnv = process.env): { uri: string; experiment: string } | undefined {
  const uri = spec.tracking?.mlflow?.uri ?? env.MLFLOW_TRACKING_URI;
  if (!uri) return undefined;
  return { uri, experiment: spec.tracking?.mlflow?.experiment ?? spec.name };
}

export function clientFor(uri: string): MlflowClient {
  let client = clients.get(uri);
  if (!client) clients.set(uri, (client = new MlflowClient(uri, credentialsFromEnv(process.env))));
  return client;
}

export async function experimentOf(client: MlflowClient, name: string): Promise<string> {
  const key = `${client.uri} ${name}`;
  let id = experiments.get(key);
  if (!id) experiments.set(key, (id = await client.experimentId(name)));
  return id;
}

const TAG_KEY = 'roundhouse.key';

/** What a run is made with (its key tag added). */
interface RunToMake {
  name: string;
  tags: Record<string, string>;
  params: Record<string, string>;
}

/** The run tagged with `key` in the experiment, if one was made. */
export async function keyedRun(client: MlflowClient, experimentId: string, key: string): Promise<string | undefined> {
  const cacheKey = `${client.uri} ${experimentId} ${key}`;
  const runId = runIds.get(cacheKey) ?? (await client.findRun(experimentId, TAG_KEY, key));
  if (runId) runIds.set(cacheKey, runId);
  return runId;
}

/**
 * The run tagged with `key` in the experiment, made (with `create`'s tags and params) when there is none. A sweep's
 * arms reach the runs they share (the campaign's, the sweep's) side by side: in one worker, one of them makes each.
 */
async function ensureRun(client: MlflowClient, experimentId: string, key: string, create: () => RunToMake): Promise<string> {
  const cacheKey = `${client.uri} ${experimentId} ${key}`;
  let pending = making.get(cacheKey);
  if (!pending) {
    pending = findOrMakeRun(client, experimentId, key, create).finally(() => making.delete(cacheKey));
    making.set(cacheKey, pending);
  }
  return pending;
}

async function findOrMakeRun(client: MlflowClient, experimentId: string, key: string, create: () => RunToMake): Promise<string> {
  const found = await keyedRun(client, experimentId, key);
  if (found) return found;
  const { name, tags, params } = create();
  let runId = await client.createRun(experimentId, { name, startTime: Date.now(), tags: { ...tags, [TAG_KEY]: key } });
  await client.logBatch(runId, { params });
  // Two creators racing (workers side by side; one round's attempts run one at a time): the oldest run is kept.
  const oldest = await client.findRun(experimentId, TAG_KEY, key);
  if (oldest && oldest !== runId) {
    await client.setStatus(runId, 'KILLED', Date.now());
    runId = oldest;
  }
  runIds.set(`${client.uri} ${experimentId} ${key}`, runId);
  return runId;
}

/** The spec as MLflow params (dotted keys, scalar values); it holds no secrets (keys live in the worker's env). */
export function specParams(spec: object, prefix = ''): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(spec)) {
    const name = prefix ? `${prefix}.${key}` : key;
    if (value === undefined || value === null) continue;
    if (Array.isArray(value)) out[name] = JSON.stringify(value);
    else if (typeof value === 'object') Object.assign(out, specParams(value as object, name));
    else out[name] = String(value);
  }
  return out;
}

/** Params without the given fields (dotted paths) and what lies under them. */
function withoutFields(params: Record<string, string>, fields: string[]): Record<string, string> {
  return Object.fromEntries(Object.entries(params).filter(([key]) => !fields.some((f) => key === f || key.startsWith(`${f}.`))));
}

function uiLink(workflowId: string): string {
  const ui = (process.env.ROUNDHOUSE_UI_URL ?? 'http://127.0.0.1:8233').replace(/\/+$/, '');
  const namespace = Context.current().info.workflowNamespace ?? 'default';
  return `${ui}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}

export async function campaignRun(
  client: MlflowClient,
  experimentId: string,
  campaignId: string,
  params: Record<string, string>,
): Promise<string> {
  return ensureRun(client, experimentId, `campaign/${campaignId}`, () => ({
    name: campaignId,
    tags: {
      'roundhouse.campaign_id': campaignId,
      'roundhouse.workflow_id': campaignId,
      'roundhouse.temporal_ui': uiLink(campaignId),
      'mlflow.source.name': 'roundhouse',
    },
    params: { campaign_id: campaignId, ...params },
  }));
}

/** A staged campaign's stage: a run nested under the campaign's, made by its first round or the campaign's summary. */
export async function stageRun(
  client: MlflowClient,
  experimentId: string,
  campaignId: string,
  stage: { stage: number; name: string; kind: string },
  campaignParams: Record<string, string>,
): Promise<string> {
  const parent = await campaignRun(client, experimentId, campaignId, campaignParams);
  return ensureRun(client, experimentId, `stage/${campaignId}/${stage.stage}`, () => ({
    name: `stage-${stage.stage}-${stage.name}`,
    tags: {
      'mlflow.parentRunId': parent,
      'roundhouse.campaign_id': campaignId,
      'roundhouse.workflow_id': campaignId,
      'roundhouse.stage': String(stage.stage),
      'roundhouse.stage_name': stage.name,
      'roundhouse.kind': stage.kind,
    },
    params: { stage: String(stage.stage), stage_name: stage.name, kind: stage.kind },
  }));
}

/** What a sweep's run is made with: its round, where it nests, and the fields its arms set (the swept fields). */
export interface SweepRunOf {
  campaignId: string;
  round: number;
  /** The campaign's run, or its stage's. */
  parent: string;
  fields: string[];
  kind?: string;
  stage?: number;
}

/** A sweep's round: a run under the campaign's (or its stage's), made by its first arm tracked or the campaign's summary. */
export async function sweepRun(client: MlflowClient, experimentId: string, s: SweepRunOf): Promise<string> {
  const workflowId = `${s.campaignId}-round-${s.round}`;
  return ensureRun(client, experimentId, `round/${s.campaignId}/${s.round}`, () => ({
    name: `round-${s.round}`,
    tags: { 'mlflow.parentRunId': s.parent, ...roundTags(s.campaignId, workflowId, s), 'roundhouse.sweep': 'true' },
    params: { 'sweep.fields': s.fields.join(', ') },
  }));
}

/** The key of an arm's run: under its campaign's round (there is no campaign of the arm's own id). */
export const armRunKey = (campaignId: string, round: number, arm: number) => `arm/${campaignId}/${round}/${arm}`;

/** A round's run (an arm's: under its sweep's), made with the runs above it by the round's first tracking call. */
export async function roundRun(
  target: { uri: string; experiment: string },
  r: RoundTracking,
): Promise<{ client: MlflowClient; runId: string }> {
  const client = clientFor(target.uri);
  const experimentId = await experimentOf(client, target.experiment);
  const kind = kindOf(r.spec);
  const { sweepArm, ...roundSpec } = r.spec;
  // A staged campaign's first round makes the campaign's run: its stage is no param of the campaign, nor are the
  // fields an arm of a sweep sets (each arm's own).
  const { stage, ...spec } = roundSpec;
  const campaignId = sweepArm?.campaignId ?? r.campaignId;
  const campaignParams = withoutFields(specParams(spec), Object.keys(sweepArm?.assign ?? {}));
  const above = stage
    ? await stageRun(client, experimentId, campaignId, { ...stage, kind }, campaignParams)
    : await campaignRun(client, experimentId, campaignId, campaignParams);
  const run = { round: r.round, kind, stage: stage?.stage, params: specParams(roundSpec) };
  const runId = sweepArm
    ? await armRun(client, experimentId, sweepArm, run, above)
    : await ensureRun(client, experimentId, `round/${campaignId}/${r.round}`, () => {
        const workflowId = `${campaignId}-round-${r.round}`;
        return {
          name: `round-${r.round}`,
          tags: { 'mlflow.parentRunId': above, ...roundTags(campaignId, workflowId, run) },
          params: run.params,
        };
      });
  return { client, runId };
}

interface RoundRunOf {
  round: number;
  kind: string;
  stage?: number;
  params: Record<string, string>;
}

/** A round's tags: its campaign, number, workflow (and a link to it), kind and stage. */
function roundTags(campaignId: string, workflowId: string, run: { round: number; kind?: string; stage?: number }): Record<string, string> {
  return {
    'roundhouse.campaign_id': campaignId,
    'roundhouse.round': String(run.round),
    'roundhouse.workflow_id': workflowId,
    'roundhouse.temporal_ui': uiLink(workflowId),
    ...(run.kind ? { 'roundhouse.kind': run.kind } : {}),
    ...(run.stage !== undefined ? { 'roundhouse.stage': String(run.stage) } : {}),
  };
}

/** An arm's round: a run under its sweep's (made by whichever arm is tracked first), its params the arm's spec. */
async function armRun(client: MlflowClient, experimentId: string, arm: SweepArmTracking, run: RoundRunOf, above: string): Promise<string> {
  const fields = Object.keys(arm.assign);
  const sweep = await sweepRun(client, experimentId, {
    campaignId: arm.campaignId,
    round: run.round,
    parent: above,
    fields,
    kind: run.kind,
    stage: run.stage,
  });
  return ensureRun(client, experimentId, armRunKey(arm.campaignId, run.round, arm.arm), () => {
    // The arm's round: the sweep's (the campaign's round) child for the arm (workflows/sweep/sweep.ts).
    const workflowId = `${arm.campaignId}-round-${run.round}-arm-${arm.arm}`;
    return {
      name: `arm-${arm.arm}`,
      tags: {
        'mlflow.parentRunId': sweep,
        ...roundTags(arm.campaignId, workflowId, run),
        'roundhouse.arm': String(arm.arm),
        'roundhouse.assign': describeAssignment(arm.assign),
      },
      params: { ...run.params, arm: String(arm.arm) },
    };
  });
}
