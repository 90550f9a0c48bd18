import fs from 'node:fs';
import path from 'node:path';
import { LineCounter, parseDocument, isNode } from 'yaml';
import { z } from 'zod';
import { describeAssignment, withAssignment } from '../rules/sweep';
import { ConfigError } from '../rules/errors';
import { ROUND_KIND } from '../rules/round-kinds';
import { CampaignSpecSchema, GateSpecSchema, type GateSpec, type RoundKindSpec } from './spec-blocks';
import type { RoundsSpec } from './spec-campaign';
import type { EvaluationSpec } from './spec-evaluation';
import type { DataSpec, SamplingSpec, TrainingSpec } from './spec-training';

export { CampaignSpecSchema } from './spec-blocks';
export { DEFAULT_SEGMENT_SECONDS, DEFAULT_SEGMENT_STEPS } from './spec-training';
export type { DpoSpec, GateMetric, GateSpec, EnvironmentSpec, GrpoSpec, RewardSpec, RoundKindSpec } from './spec-blocks';
export type { NotifyEvent, RoundsSpec } from './spec-campaign';
export type { EvaluationSpec } from './spec-evaluation';
export type { ProviderSpec } from './spec-provider';
export type { DataSpec, LrSchedule, SamplingSpec, TrainingSpec } from './spec-training';

/**
 * The campaign spec: one YAML or JSON file (JSON is YAML). Paths inside it are relative to the file. A spec may list
 * `stages` (SFT, then GRPO, then DPO…): each stage sets its own data, training, sampling, evaluation, round and
 * rounds blocks (a block it omits is the campaign's) and inherits the rest — provider, budget, tracking, advanced,
 * retention. Every stage is checked as a whole spec before anything starts.
 */

/** One stage of a staged campaign, resolved: its blocks (its own or the campaign's) and how it hands over. */
export interface StageSpec {
  name: string;
  data: DataSpec;
  training: TrainingSpec;
  sampling: SamplingSpec;
  evaluation: EvaluationSpec;
  round: RoundKindSpec;
  rounds: RoundsSpec;
  /** What the stage's last round must reach before the next stage starts; a miss ends the campaign (failed). */
  gate?: GateSpec;
  /** Stages after the first: also load the previous stage's optimizer state (default: its weights only). */
  loadOptimizer: boolean;
}

/**
 * A parsed spec. With `stages`, the top-level blocks are the first stage's (what validation of a one-stage spec
 * reads); the campaign runs each stage in turn.
 */
export type CampaignSpec = z.infer<typeof CampaignSpecSchema> & { stages?: StageSpec[] };

/** The blocks a stage may set; everything else is the campaign's. */
const STAGE_BLOCKS = ['data', 'training', 'sampling', 'evaluation', 'round', 'rounds'] as const;
const CAMPAIGN_FIELDS = ['name', 'provider', 'budget', 'advanced', 'tracking', 'retention', 'promotion', 'notify'];

const StageEntrySchema = z
  .object({
    name: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$/, 'letters, digits, dash and underscore; at most 40 characters')
      .optional(),
    ...Object.fromEntries(STAGE_BLOCKS.map((b) => [b, z.unknown().optional()])),
    gate: GateSpecSchema.optional(),
    loadOptimizer: z.boolean().default(false),
  })
  .strict();
const StagesSchema = z.array(StageEntrySchema).min(1).max(16);
type StageEntry = z.infer<typeof StageEntrySchema> & Partial<Record<(typeof STAGE_BLOCKS)[number], unknown>>;

/** A spec error names the file, the line, and the field: `campaign.yaml:12 training.epochs: …`. */
export class SpecError extends ConfigError {
  constructor(
    readonly file: string,
    readonly line: number | undefined,
    readonly field: string,
    problem: string,
  ) {
    super(`${file}${line ? `:${line}` : ''}${field ? ` ${field}` : ''}`, problem);
    this.name = 'SpecError';
  }
}

type FieldPath = readonly PropertyKey[];

/** Parses spec text; `file` is used in errors and to resolve the data paths. */
export function parseCampaignSpec(text: string, file: string): CampaignSpec {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter });
  if (doc.errors.length > 0) {
    const e = doc.errors[0]!;
    throw new SpecError(file, e.linePos?.[0]?.line, '', `not valid YAML or JSON: ${e.message.split('\n')[0]}`);
  }
  const lineOf = (p: FieldPath): number | undefined => {
    for (let depth = p.length; depth >= 0; depth--) {
      const node = doc.getIn(p.slice(0, depth) as (string | number)[], true);
      if (isNode(node) && node.range) return lineCounter.linePos(node.range[0]).line;
    }
    return undefined;
  };
  const fail = (fieldPath: FieldPath, message: string): never => {
    throw new SpecError(file, lineOf(fieldPath), fieldPath.join('.') || '(spec)', message);
  };
  const dir = path.dirname(path.resolve(file));
  const raw: unknown = doc.toJS();
  if (raw && typeof raw === 'object' && !Array.isArray(raw) && 'stages' in raw)
    return parseStaged(raw as Record<string, unknown>, dir, fail);
  const parsed = CampaignSpecSchema.safeParse(raw);
  if (!parsed.success) return failOn(parsed.error.issues, fail);
  if (parsed.data.sweep) checkSweepArms(raw as Record<string, unknown>, parsed.data, fail);
  return resolvePaths(parsed.data, dir);
}

/**
 * Every arm of a sweep is a whole spec, checked before anything starts: an arm's value a field refuses is named with
 * the arm. The arms are evaluated at every rung (`evaluation.every` is the rung).
 */
function checkSweepArms(raw: Record<string, unknown>, spec: CampaignSpec, fail: (p: FieldPath, m: string) => never): void {
  const sweep = spec.sweep!;
  const every = spec.evaluation.every;
  if (every !== undefined && every !== sweep.select.rungs)
    fail(['evaluation', 'every'], `is the sweep's rung (sweep.select.rungs: ${sweep.select.rungs}): leave it unset or make them equal`);
  if (spec.evaluation.earlyStop) fail(['evaluation', 'earlyStop'], 'is not for a sweep: its rungs stop the arms (sweep.select)');
  const rest = Object.fromEntries(Object.entries(raw).filter(([k]) => k !== 'sweep'));
  for (const arm of sweep.arms) {
    const parsed = CampaignSpecSchema.safeParse(withAssignment(rest, arm.assign));
    if (parsed.success) continue;
    const issue = parsed.error.issues[0]!;
    const field = issue.path.join('.');
    const set =
      Object.keys(arm.assign).find((f) => field === f || field.startsWith(`${f}.`) || f.startsWith(`${field}.`)) ??
      Object.keys(arm.assign)[0]!;
    fail(['sweep', 'over', set], `arm ${arm.arm} (${describeAssignment(arm.assign)}): ${field || '(spec)'}: ${issue.message}`);
  }
}

/** The first issue zod found, reported as a SpecError; `where` maps its path to the field in the file. */
function failOn(
  issues: z.core.$ZodIssue[],
  fail: (p: FieldPath, m: string) => never,
  where: (p: FieldPath, missing: boolean) => { path: FieldPath; note?: string } = (p) => ({ path: p }),
): never {
  // A misspelt key explains the "missing" field it was meant to be: report it first.
  const issue = issues.find((i) => i.code === 'unrecognized_keys') ?? issues[0]!;
  let fieldPath: FieldPath = issue.path;
  let message = issue.message;
  if (issue.code === 'unrecognized_keys') {
    fieldPath = [...issue.path, issue.keys[0]!];
    message = 'is not a known field';
  } else if (issue.code === 'invalid_type' && /received undefined/.test(issue.message)) {
    message = 'is required';
  }
  const mapped = where(fieldPath, message === 'is required');
  return fail(mapped.path, mapped.note ? `${message} ${mapped.note}` : message);
}

/**
 * A staged spec: every stage is the campaign's spec with the stage's blocks in place of the campaign's, checked in
 * full (so a bad field in stage 2 is refused before stage 1 provisions anything). Errors name the stage's field when
 * the stage set the block, else the campaign's field and the stage that inherited it.
 */
function parseStaged(raw: Record<string, unknown>, dir: string, fail: (p: FieldPath, m: string) => never): CampaignSpec {
  const { stages: rawStages, ...campaign } = raw;
  if (campaign.sweep !== undefined)
    fail(['sweep'], 'is not yet available with stages: sweep a one-stage campaign, then start the stages from its winner');
  if (Array.isArray(rawStages)) {
    rawStages.forEach((entry, i) => {
      const own = entry && typeof entry === 'object' ? Object.keys(entry as object) : [];
      const inherited = own.find((k) => CAMPAIGN_FIELDS.includes(k) && k !== 'name');
      if (inherited)
        fail(
          ['stages', i, inherited],
          `is the campaign's, not a stage's: every stage uses the campaign's ${CAMPAIGN_FIELDS.slice(1).join(', ')}`,
        );
    });
  }
  const list = StagesSchema.safeParse(rawStages);
  if (!list.success) return failOn(list.error.issues, fail, (p) => ({ path: ['stages', ...p] }));
  const handOver = "starts from the previous stage's final training checkpoint: only the first stage may set rounds.startFrom";
  const stages = (list.data as StageEntry[]).map((entry, i): { spec: CampaignSpec; stage: StageSpec } => {
    const own = STAGE_BLOCKS.filter((b) => entry[b] !== undefined);
    // Promotion puts the last stage's best round to the line: only the last stage is checked for it (its sets, its kind).
    const unpromoted = Object.fromEntries(Object.entries(campaign).filter(([block]) => block !== 'promotion'));
    const merged = { ...(i === list.data.length - 1 ? campaign : unpromoted), ...Object.fromEntries(own.map((b) => [b, entry[b]])) };
    const label = `stage ${i + 1}${entry.name ? ` (${entry.name})` : ''}`;
    const parsed = CampaignSpecSchema.safeParse(merged);
    if (!parsed.success)
      return failOn(parsed.error.issues, fail, (p, missing) => {
        const block = p[0] as string;
        if (own.includes(block as (typeof own)[number])) return { path: ['stages', i, ...p] };
        if (missing && p.length === 1)
          return { path: ['stages', i, block], note: `(${label} sets no ${block} and the campaign has none to inherit)` };
        return { path: p, note: `(in ${label}, which inherits the campaign's ${block})` };
      });
    const spec = resolvePaths(parsed.data, dir);
    const kind = spec.round.kind;
    if (i > 0 && spec.rounds.startFrom)
      fail(
        own.includes('rounds') ? ['stages', i, 'rounds', 'startFrom'] : ['rounds', 'startFrom'],
        own.includes('rounds')
          ? `${label} ${handOver}`
          : `${label} inherits it with the campaign's rounds, but ${handOver} (set it in stage 1's own rounds)`,
      );
    const gateMetrics = ROUND_KIND[kind].gateMetrics;
    if (entry.gate && !gateMetrics.includes(entry.gate.metric))
      fail(
        ['stages', i, 'gate', 'metric'],
        `${entry.gate.metric} is not measured by ${ROUND_KIND[kind].aRound}; for ${kind}: ${gateMetrics.join(', ')}`,
      );
    const { data, training, sampling, evaluation, round, rounds } = spec;
    const stage: StageSpec = {
      name: entry.name ?? kind,
      data,
      training,
      sampling,
      evaluation,
      round,
      rounds,
      ...(entry.gate ? { gate: entry.gate } : {}),
      loadOptimizer: entry.loadOptimizer,
    };
    return { spec, stage };
  });
  const names = stages.map((s) => s.stage.name);
  const repeated = names.findIndex((n, i) => names.indexOf(n) !== i);
  if (repeated >= 0) {
    const unnamed = (list.data as StageEntry[]).some((e, i) => names[i] === names[repeated] && e.name === undefined);
    fail(
      ['stages', repeated, 'name'],
      `'${names[repeated]}' names two stages${unnamed ? ' (a stage without a name is named after its round kind)' : ''}: give each stage its own name (stage names label its rounds)`,
    );
  }
  const promotion = stages.at(-1)!.spec.promotion;
  return { ...stages[0]!.spec, ...(promotion ? { promotion } : {}), stages: stages.map((s) => s.stage) };
}

/** Local paths are relative to the spec; an s3:// URI is taken as it is. */
function resolvePaths(spec: CampaignSpec, dir: string): CampaignSpec {
  const resolveData = (p: string) => (p.startsWith('s3://') ? p : path.resolve(dir, p));
  spec.data.train = resolveData(spec.data.train);
  spec.data.eval = resolveData(spec.data.eval);
  if (spec.data.test) spec.data.test = resolveData(spec.data.test);
  if (spec.provider.tokenizer) spec.provider.tokenizer = path.resolve(dir, spec.provider.tokenizer);
  if (spec.round.grpo?.reward?.kind === 'module') spec.round.grpo.reward.path = path.resolve(dir, spec.round.grpo.reward.path);
  return spec;
}

export function loadCampaignSpec(file: string): CampaignSpec {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new SpecError(file, undefined, '', (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message);
  }
  return parseCampaignSpec(text, file);
}
