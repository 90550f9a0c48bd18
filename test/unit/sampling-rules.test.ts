import { parseCampaignSpec, SpecError } from '../../config/io/spec';
import { drawSeed, stopToSend } from '../../config/rules/sampling';

const spec = (provider: string, sampling: string, stages = '') => `name: seeds
provider: ${provider}
data: { train: data/train.jsonl, eval: data/eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 256, seed: 3 }
sampling: ${sampling}
${stages}`;

function specError(text: string): SpecError {
  try {
    parseCampaignSpec(text, 'campaign.yaml');
  } catch (err) {
    if (err instanceof SpecError) return err;
    throw err;
  }
  throw new Error('expected a SpecError');
}

describe('sampling.seed before anything is provisioned', () => {
  test('is refused on Together with more than one generator replica, naming the field and why', () => {
    const err = specError(spec('{ kind: together, model: Qwen/Qwen3-8B, generatorReplicas: 2 }', '{ maxTokens: 4, seed: 7 }'));
    expect(err.field).toBe('sampling.seed');
    expect(err.line).toBe(5);
    expect(err.message).toMatch(/not supported on together with provider\.generatorReplicas 2: .*more than one inference engine/);
  });

  test('a stage that sets it is refused in its own block when the campaign resource has 2 replicas', () => {
    const err = specError(
      spec(
        '{ kind: local, model: roundhouse/tiny-chat, generatorReplicas: 2 }',
        '{ maxTokens: 4 }',
        'stages:\n  - { name: sft }\n  - { name: rl, sampling: { maxTokens: 4, temperature: 1, seed: 1 } }',
      ),
    );
    expect(err.field).toBe('stages.1.sampling.seed');
  });

  test('is taken on Together with one replica, and on Baseten whatever its replicas', () => {
    const one = parseCampaignSpec(spec('{ kind: together, model: Qwen/Qwen3-8B }', '{ maxTokens: 4, seed: 7 }'), 'campaign.yaml');
    expect(one.sampling.seed).toBe(7);
    const baseten = parseCampaignSpec(
      spec('{ kind: baseten, model: Qwen/Qwen3.5-2B, generatorReplicas: 2 }', '{ maxTokens: 4, seed: 7 }'),
      'campaign.yaml',
    );
    expect(baseten.sampling.seed).toBe(7);
  });
});

describe('what a draw sends', () => {
  const seeds = (kind: 'local' | 'together' | 'baseten' | 'tinker', seed?: number) =>
    drawSeed({ provider: { kind, generatorReplicas: 1 }, training: { seed: 3 }, sampling: { seed } }, (base) => base * 10 + 1);

  test('Together (and local, its wire) sends no seed unless sampling.seed is set; Tinker and Baseten derive one', () => {
    expect(seeds('together')).toBeUndefined();
    expect(seeds('local')).toBeUndefined();
    expect(seeds('together', 7)).toBe(71);
    expect(seeds('tinker')).toBe(31); // from training.seed, as before
    expect(seeds('baseten')).toBe(31);
    expect(seeds('baseten', 7)).toBe(71);
  });

  test('stop strings go only where the dialect, or the model per its listing, takes them', () => {
    const stop = ['\n'];
    expect(stopToSend('together', { stopStrings: true }, stop)).toEqual(stop);
    expect(stopToSend('together', { stopStrings: false }, stop)).toBeUndefined();
    expect(stopToSend('local', {}, stop)).toBeUndefined(); // a listing that does not say: cut in code, never refused
    expect(stopToSend('baseten', {}, stop)).toEqual(stop);
    expect(stopToSend('tinker', { stopStrings: true }, stop)).toBeUndefined();
    expect(stopToSend('together', { stopStrings: true }, [])).toBeUndefined();
  });
});
