import { parseCampaignSpec, SpecError } from '../../config/io/spec';
import { abilitiesOf, DIALECTS, type Dialect, type DialectAbilities } from '../../config/rules/dialects';

/**
 * The spec's provider checks are the dialect table read back: each field that needs an ability is refused, naming the
 * field and the product, on exactly the dialects whose abilities lack it, and accepted on every other.
 */

const spec = (kind: Dialect, extra: { provider?: string; top?: string; round?: string; temperature?: number }) => `name: d
provider:
  kind: ${kind}
  model: roundhouse/tiny-chat
${extra.provider ?? ''}data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 4, temperature: ${extra.temperature ?? 0} }
${extra.round ? `round:\n${extra.round}` : ''}${extra.top ?? ''}`;

const grpo = (lines: string) => `  kind: grpo\n  grpo:\n    reward: { kind: numeric }\n${lines}`;

interface Case {
  what: string;
  field: string;
  needs: (a: DialectAbilities) => boolean;
  text: (kind: Dialect) => string;
  refusal: (a: DialectAbilities, kind: Dialect) => RegExp;
}

const cases: Case[] = [
  {
    what: 'a GRPO KL reference',
    field: 'round.grpo.reference',
    needs: (a) => a.referenceSession,
    text: (k) => spec(k, { temperature: 1, round: grpo('    reference: start\n    loss: { type: ppo }\n') }),
    refusal: (a) => new RegExp(`^is not available on ${a.name}: .*; remove it`),
  },
  {
    what: 'the grpo loss',
    field: 'round.grpo.loss.type',
    needs: (a) => a.policyLosses.includes('grpo'),
    text: (k) => spec(k, { temperature: 1, round: grpo('    loss: { type: grpo }\n') }),
    refusal: (a) => new RegExp(`^${a.name} has no grpo loss: use ppo or importance_sampling`),
  },
  {
    what: 'W&B tracking',
    field: 'tracking.wandb',
    needs: (a) => a.wandb,
    text: (k) => spec(k, { top: 'tracking: { wandb: { project: p } }\n' }),
    refusal: (a) => new RegExp(`^is not available on ${a.name}: its API takes no W&B settings.*; use tracking.mlflow`),
  },
  {
    what: 'token prices',
    field: 'provider.tokenPrices',
    needs: (a) => a.billing === 'tokens',
    text: (k) => spec(k, { provider: '  tokenPrices: { prefill: 1, sample: 1, train: 1 }\n' }),
    refusal: (_a, k) => new RegExp(`^is for a provider that bills tokens \\(tinker\\); ${k} bills GPU time`),
  },
  {
    what: 'negotiated token prices',
    field: 'budget.prices.tokens',
    needs: (a) => a.billing === 'tokens',
    text: (k) => spec(k, { top: 'budget: { maxUsd: 10, prices: { tokens: { prefill: 1, sample: 1, train: 1 } } }\n' }),
    refusal: (_a, k) => new RegExp(`^is for a provider that bills tokens \\(tinker\\); ${k} bills GPU time: set budget\\.prices\\.gpuHour`),
  },
  {
    what: 'a negotiated GPU-hour price',
    field: 'budget.prices.gpuHour',
    needs: (a) => a.billing === 'gpu-time',
    text: (k) => spec(k, { top: 'budget: { maxUsd: 10, prices: { gpuHour: 3 } }\n' }),
    refusal: (_a, k) =>
      new RegExp(`^is for a provider that bills GPU time \\(local, together, baseten\\); ${k} bills tokens: set budget\\.prices\\.tokens`),
  },
  {
    what: "Baseten's run settings",
    field: 'provider.baseten',
    needs: (a) => a.runSettings,
    text: (k) => spec(k, { provider: '  baseten: { replicas: 1 }\n' }),
    refusal: (_a, k) => new RegExp(`^is for kind baseten \\(Baseten Loops' run settings\\); this provider is ${k}$`),
  },
  {
    what: 'a checkpoint TTL',
    field: 'retention.ttl',
    needs: (a) => a.checkpointTtl,
    text: (k) => spec(k, { top: 'retention: { ttl: 2h }\n' }),
    refusal: (_a, k) => new RegExp(`^is a Tinker checkpoint TTL; ${k}'s API takes none$`),
  },
  {
    what: 'a dpo round',
    field: 'round.kind',
    needs: (a) => a.customLoss,
    text: (k) => spec(k, { round: '  kind: dpo\n' }),
    refusal: (a) => new RegExp(`^dpo trains through a custom loss \\(custom_forward_backward\\), which ${a.name} does not offer$`),
  },
  {
    what: 'a custom round (a Python loss function)',
    field: 'round.kind',
    needs: (a) => a.customLoss,
    text: (k) => spec(k, { round: '  kind: custom\n  custom: { loss: { kind: python, name: simpo, taskQueue: losses } }\n' }),
    refusal: (a) =>
      new RegExp(
        `^custom trains through a custom loss \\(forward, your function, custom_forward_backward\\), which ${a.name} does not offer$`,
      ),
  },
];

function refusal(text: string): SpecError | undefined {
  try {
    parseCampaignSpec(text, 'campaign.yaml');
    return undefined;
  } catch (err) {
    if (err instanceof SpecError) return err;
    throw err;
  }
}

describe.each(cases)('$what ($field)', ({ field, needs, text, refusal: expected }) => {
  test.each(DIALECTS.map((k) => [k]))('on %s: refused exactly when the dialect table lacks the ability', (kind) => {
    const abilities = abilitiesOf(kind);
    const err = refusal(text(kind));
    if (needs(abilities)) {
      expect(err).toBeUndefined();
    } else {
      expect(err?.field).toBe(field);
      expect(err?.message.slice(err.message.indexOf(`${field}: `) + field.length + 2)).toMatch(expected(abilities, kind));
    }
  });
});

test('what each dialect is refused, written out: the table as the checks read it', () => {
  const refusedOn = (kind: Dialect) => cases.filter((c) => !c.needs(abilitiesOf(kind))).map((c) => c.field);
  expect(Object.fromEntries(DIALECTS.map((k) => [k, refusedOn(k)]))).toEqual({
    local: ['provider.tokenPrices', 'budget.prices.tokens', 'provider.baseten', 'retention.ttl'],
    together: ['provider.tokenPrices', 'budget.prices.tokens', 'provider.baseten', 'retention.ttl'],
    baseten: [
      'round.grpo.reference',
      'round.grpo.loss.type',
      'tracking.wandb',
      'provider.tokenPrices',
      'budget.prices.tokens',
      'retention.ttl',
      'round.kind',
      'round.kind',
    ],
    tinker: ['round.grpo.loss.type', 'tracking.wandb', 'budget.prices.gpuHour', 'provider.baseten'],
  });
});
