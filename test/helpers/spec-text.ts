import { parseCampaignSpec, SpecError } from '../../config/io/spec';

/** A small valid campaign spec (YAML): the specs under test add to it or replace parts of it. */
export const validSpec = `name: tickets
provider:
  kind: local
  model: roundhouse/tiny-chat
data:
  train: data/train.jsonl
  eval: data/eval.jsonl
training:
  epochs: 2
  batchSize: 8
  learningRate: 0.01
  loraRank: 8
  maxSeqLen: 256
sampling:
  maxTokens: 4
evaluation:
  scorer: exact
`;

/** The SpecError a spec's text is refused with (the test fails if it parses). */
export function specError(text: string, file = 'campaign.yaml'): SpecError {
  try {
    parseCampaignSpec(text, file);
  } catch (err) {
    if (err instanceof SpecError) return err;
    throw err;
  }
  throw new Error('expected a SpecError');
}
