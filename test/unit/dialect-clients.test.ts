import os from 'node:os';
import path from 'node:path';
import { parseCampaignSpec } from '../../config/io/spec';
import { abilitiesOf, DIALECTS } from '../../config/rules/dialects';
import { ProviderRegistry } from '../../workers/providers';
import { validateCampaignLocally } from '../../workers/validate';

/**
 * The worker builds each dialect's client from the dialect table: the client of the wire it speaks, keyed by the
 * worker's environment, or by the emulator's own key where the dialect is the embedded emulator.
 */

const stateDir = path.join(os.tmpdir(), `roundhouse-dialect-clients-${process.pid}`);
const baseUrl = 'http://127.0.0.1:9';

test('each dialect gets the client of the wire it speaks; keys come from the worker environment, never for the embedded emulator', async () => {
  const env = { TOGETHER_API_KEY: 'together-key', BASETEN_API_KEY: 'baseten-key', TINKER_API_KEY: 'any-key' };
  const registry = new ProviderRegistry({ stateDir, env });
  try {
    for (const kind of DIALECTS) {
      const provider = await registry.providerFor({ kind, baseUrl, model: 'm', inactiveTimeoutSeconds: 1800 });
      expect({ kind, client: provider.kind }).toEqual({ kind, client: abilitiesOf(kind).speaks });
    }
  } finally {
    await registry.close();
  }
});

test("a dialect whose key the worker lacks is refused naming the variable; the embedded emulator needs none; hosted Tinker wants a 'tml-' key", async () => {
  const registry = new ProviderRegistry({ stateDir, env: { TINKER_API_KEY: 'not-a-tinker-key' } });
  const build = (kind: (typeof DIALECTS)[number], url?: string) =>
    registry.providerFor({ kind, ...(url ? { baseUrl: url } : {}), model: 'm', inactiveTimeoutSeconds: 1800 });
  try {
    await expect(build('local', baseUrl)).resolves.toMatchObject({ kind: 'together' });
    await expect(build('together', baseUrl)).rejects.toThrow('TOGETHER_API_KEY is not set in the worker environment');
    await expect(build('baseten')).rejects.toThrow('BASETEN_API_KEY is not set in the worker environment');
    await expect(build('tinker')).rejects.toThrow("TINKER_API_KEY must start with 'tml-' for the hosted Tinker service");
    await expect(build('tinker', baseUrl)).resolves.toMatchObject({ kind: 'tinker' }); // a self-hosted server takes any key
  } finally {
    await registry.close();
  }
});

test("only the embedded emulator's models are checked before anything runs: another dialect's listing is the provider's", () => {
  const spec = (kind: string) =>
    parseCampaignSpec(
      `name: m
provider: { kind: ${kind}, model: nobody/no-such-model }
data: { train: train.jsonl, eval: eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 64 }
sampling: { maxTokens: 4 }
`,
      path.join(stateDir, 'campaign.yaml'),
    );
  expect(() => validateCampaignLocally(spec('local'))).toThrow(
    "provider.model: 'nobody/no-such-model' is not one of the emulator's models",
  );
  // Elsewhere the check goes on to the data (absent here), not the model.
  expect(() => validateCampaignLocally(spec('together'))).toThrow(/train\.jsonl/);
});
