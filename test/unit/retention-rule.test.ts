import { parseCampaignSpec } from '../../config/io/spec';
import { deletionRuleOf } from '../../config/rules/retention';

const spec = (retention: string) => `name: ttl
provider: { kind: tinker, model: Qwen/Qwen3-8B }
data: { train: data/train.jsonl, eval: data/eval.jsonl }
training: { epochs: 1, batchSize: 8, learningRate: 0.01, loraRank: 8, maxSeqLen: 256 }
sampling: { maxTokens: 4 }
retention: ${retention}
`;

const ruleOf = (retention: string) => deletionRuleOf(parseCampaignSpec(spec(retention), 'campaign.yaml').retention);

test('a retention block with only a TTL asks for no deletion; with keepBest/keepLast, or empty, for the rule with its defaults', () => {
  expect(ruleOf('{ ttl: 2h }')).toBeUndefined();
  expect(ruleOf('{}')).toEqual({ keepBest: 1, keepLast: 2 });
  expect(ruleOf('{ ttl: 2h, keepLast: 3 }')).toEqual({ keepBest: 1, keepLast: 3 });
  expect(ruleOf('{ keepBest: 0 }')).toEqual({ keepBest: 0, keepLast: 2 });
  expect(deletionRuleOf(undefined)).toBeUndefined();
});
