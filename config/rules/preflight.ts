import type { CampaignSpec } from '../io/spec';
import { nextDataCall, pythonChecksOf, type PythonCheck } from './python-calls';
import { stageSpecOf } from './stages';

/**
 * What a campaign checks before its first round provisions, besides its data: every stage's calls of the user's
 * Python functions, and the variables its worker must have. Pure: the campaign workflow and `roundhouse run` share it.
 */

/** The worker's variable holding the webhook's HMAC key when the spec names none (absent there: bodies go unsigned). */
export const DEFAULT_WEBHOOK_SECRET_ENV = 'ROUNDHOUSE_WEBHOOK_SECRET';

/** A variable the campaign needs in its worker's environment, and the spec field that names it. */
export interface WorkerVariable {
  field: string;
  name: string;
}

/** `notify.webhookEnv`, and a `notify.secretEnv` the spec names (the default one is optional: unsigned without it). */
export function workerVariablesOf(spec: Pick<CampaignSpec, 'notify'>): WorkerVariable[] {
  const n = spec.notify;
  return [
    ...(n?.webhookEnv ? [{ field: 'notify.webhookEnv', name: n.webhookEnv }] : []),
    ...(n?.secretEnv ? [{ field: 'notify.secretEnv', name: n.secretEnv }] : []),
  ];
}

/**
 * Every Python function any stage calls (reward, environment with its args, scorer, and the data policy of a stage
 * with more than one round), each field labelled with its stage (`stage 2 (rl): round.grpo.environment`).
 */
export function campaignPythonChecks(spec: CampaignSpec): PythonCheck[] {
  const stages = spec.stages ?? [undefined];
  return stages.flatMap((stage, i) => {
    const one = stageSpecOf(spec, i);
    const policy = nextDataCall(one.rounds.nextData);
    const checks: PythonCheck[] = [
      ...pythonChecksOf(one),
      ...(policy && one.rounds.max > 1 ? [{ field: 'rounds.nextData', role: 'data_policy' as const, call: policy }] : []),
    ];
    const label = stage ? `stage ${i + 1} (${stage.name}): ` : '';
    return checks.map((c) => ({ ...c, field: `${label}${c.field}` }));
  });
}
