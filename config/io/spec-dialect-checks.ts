import { abilitiesOf, dialectsWith, type AbilityFlag, type Dialect, type DialectAbilities, type PolicyLoss } from '../rules/dialects';
import { ROUND_KIND, optionsOf, type NeededAbility, type RoundKind } from '../rules/round-kinds';

/**
 * What a spec asks of its provider's dialect, checked against the dialect table (config/rules/dialects.ts): one list of
 * requirements, one loop. Each requirement names the field a user changes, when it applies, the ability it needs, and
 * what to say when the dialect lacks it.
 */

type Problem = (path: (string | number)[], message: string) => void;

/** The parts of a campaign's spec the dialect's abilities bear on. */
export interface DialectCheckedSpec {
  provider: { kind: Dialect; tokenPrices?: object; baseten?: object };
  budget?: { prices?: { gpuHour?: number; tokens?: object } };
  round: { kind: RoundKind; grpo?: { reference?: string; loss: { kind?: 'builtin' | 'python'; type: PolicyLoss } } };
  tracking?: { wandb?: object };
  retention?: { ttl?: number };
}

interface DialectRequirement {
  field: string[];
  /** Whether the spec asks for it at all. */
  appliesTo(spec: DialectCheckedSpec): boolean;
  /** Whether the dialect can do what is asked. */
  has(abilities: DialectAbilities, spec: DialectCheckedSpec): boolean;
  message(abilities: DialectAbilities, spec: DialectCheckedSpec): string;
}

const namesOf = (dialects: Dialect[]) => dialects.map((d) => abilitiesOf(d).name).join(', ');
const because = (a: DialectAbilities, ability: AbilityFlag) => (a.why?.[ability] ? ` (${a.why[ability]})` : '');

const REQUIREMENTS: DialectRequirement[] = [
  {
    field: ['round', 'grpo', 'reference'],
    appliesTo: (spec) => Boolean(optionsOf(spec.round, 'grpo')?.reference),
    has: (a) => a.referenceSession,
    message: (a) =>
      `is not available on ${a.name}: ${a.why?.referenceSession ?? 'it opens no second session'}; remove it (a KL penalty needs the together dialect)`,
  },
  {
    field: ['round', 'grpo', 'loss', 'type'],
    appliesTo: (spec) => optionsOf(spec.round, 'grpo') !== undefined && spec.round.grpo!.loss.kind !== 'python',
    has: (a, spec) => a.policyLosses.includes(spec.round.grpo!.loss.type),
    message: (a, spec) =>
      `${a.name} has no ${spec.round.grpo!.loss.type} loss: use ${a.policyLosses.join(' or ')} (advantages are group-centred either way)`,
  },
  {
    field: ['round', 'grpo', 'loss', 'kind'],
    appliesTo: (spec) => optionsOf(spec.round, 'grpo')?.loss.kind === 'python',
    has: (a) => a.customLoss,
    message: (a) => `python trains through a custom loss (forward, your function, custom_forward_backward), which ${a.name} does not offer`,
  },
  {
    field: ['tracking', 'wandb'],
    appliesTo: (spec) => Boolean(spec.tracking?.wandb),
    has: (a) => a.wandb,
    message: (a) =>
      `is not available on ${a.name}: its API takes no W&B settings${because(a, 'wandb')}; use tracking.mlflow, or the together dialect`,
  },
  {
    field: ['provider', 'tokenPrices'],
    appliesTo: (spec) => Boolean(spec.provider.tokenPrices),
    has: (a) => a.billing === 'tokens',
    message: (_a, spec) =>
      `is for a provider that bills tokens (${dialectsWith((a) => a.billing === 'tokens').join(', ')}); ${spec.provider.kind} bills GPU time, whose price the provider quotes`,
  },
  {
    field: ['budget', 'prices', 'tokens'],
    appliesTo: (spec) => Boolean(spec.budget?.prices?.tokens),
    has: (a) => a.billing === 'tokens',
    message: (_a, spec) =>
      `is for a provider that bills tokens (${dialectsWith((a) => a.billing === 'tokens').join(', ')}); ${spec.provider.kind} bills GPU time: set budget.prices.gpuHour`,
  },
  {
    field: ['budget', 'prices', 'gpuHour'],
    appliesTo: (spec) => spec.budget?.prices?.gpuHour !== undefined,
    has: (a) => a.billing === 'gpu-time',
    message: (_a, spec) =>
      `is for a provider that bills GPU time (${dialectsWith((a) => a.billing === 'gpu-time').join(', ')}); ${spec.provider.kind} bills tokens: set budget.prices.tokens`,
  },
  {
    field: ['provider', 'baseten'],
    appliesTo: (spec) => Boolean(spec.provider.baseten),
    has: (a) => a.runSettings,
    message: (_a, spec) => {
      const owners = dialectsWith((a) => a.runSettings);
      return `is for kind ${owners.join(', ')} (${namesOf(owners)}' run settings); this provider is ${spec.provider.kind}`;
    },
  },
  {
    field: ['retention', 'ttl'],
    appliesTo: (spec) => spec.retention?.ttl !== undefined,
    has: (a) => a.checkpointTtl,
    message: (_a, spec) => `is a ${namesOf(dialectsWith((a) => a.checkpointTtl))} checkpoint TTL; ${spec.provider.kind}'s API takes none`,
  },
];

/** Every requirement the spec makes of its dialect that the dialect cannot meet, as a problem naming the field. */
export function dialectProblems(spec: DialectCheckedSpec, problem: Problem): void {
  const abilities = abilitiesOf(spec.provider.kind);
  for (const r of REQUIREMENTS) if (r.appliesTo(spec) && !r.has(abilities, spec)) problem([...r.field], r.message(abilities, spec));
  // What the round kind needs (its descriptor's `needs`, config/rules/round-kinds.ts).
  const { kind } = spec.round;
  for (const [need, what] of Object.entries(ROUND_KIND[kind].needs) as [NeededAbility, string][])
    if (!abilities[need]) problem(['round', 'kind'], `${kind} ${what}, which ${abilities.name} does not offer`);
}
