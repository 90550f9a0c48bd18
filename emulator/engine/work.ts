import { createHash } from 'node:crypto';
import { LearnerInputError, type TrainerModel, crossEntropyLoss, linearLogprobLoss, policyGradientLoss } from '../learner';
import type { Checkpoints } from './checkpoints';
import type { LoraSettings, OperationInput, OperationOutput, SessionRecord } from './records';
import { learnerOptions, type EngineState, type SessionRuntime } from './state';

type Input<K extends OperationInput['kind']> = Extract<OperationInput, { kind: K }>;
type Output<K extends OperationOutput['kind']> = Extract<OperationOutput, { kind: K }>;

/** What each operation does to a session's learners: the work itself, once the queue reaches it. */
export class OperationWork {
  constructor(
    private readonly state: EngineState,
    private readonly checkpoints: Checkpoints,
  ) {}

  async run(s: SessionRecord, rt: SessionRuntime, input: OperationInput): Promise<OperationOutput> {
    const output = await this.work(s, rt, input);
    countTokens(s, input, output);
    return output;
  }

  private async work(s: SessionRecord, rt: SessionRuntime, input: OperationInput): Promise<OperationOutput> {
    switch (input.kind) {
      case 'forward-backward':
        return forwardBackward(rt, input);
      case 'custom-forward-backward': {
        const result = rt.learner.forwardBackward(input.sequences, linearLogprobLoss(input.gradients));
        return { kind: 'custom-forward-backward', loss: result.loss, logprobs: result.logprobs };
      }
      case 'optim-step': {
        const { step, gradNorm, empty } = rt.learner.optimStep(input.adam);
        s.optimizerSteps += 1;
        if (empty) s.emptyOptimizerSteps += 1;
        return { kind: 'optim-step', step, gradNorm };
      }
      case 'weights-sync':
        return this.syncWeights(s, rt);
      case 'sample':
        return this.sample(s, rt, input);
      case 'trainer-reset':
        return this.resetTrainer(s, rt, input);
      case 'load-checkpoint':
        return this.loadCheckpoint(s, rt, input);
      case 'training-checkpoint':
      case 'inference-checkpoint': {
        const type = input.kind === 'training-checkpoint' ? 'training' : 'inference';
        const checkpoint = this.checkpoints.save(s, rt, type, input.name, input.ttlSeconds);
        if (input.kind === 'inference-checkpoint' && input.publish) await this.syncWeights(s, rt);
        return { kind: input.kind, checkpointId: checkpoint.id };
      }
    }
  }

  /** The generators start serving the trainer's current weights. */
  private async syncWeights(s: SessionRecord, rt: SessionRuntime): Promise<Output<'weights-sync'>> {
    const options = learnerOptions(this.state.resourceOf(s).model, s.lora);
    const state = rt.learner.exportState({ withOptimizer: false });
    const previous = rt.generator;
    rt.generator = await this.state.models.fromState(options, state, { optimizer: false });
    previous.dispose();
    delete s.generatorLora;
    s.weightsVersion = rt.learner.step;
    return { kind: 'weights-sync', weightsVersion: s.weightsVersion };
  }

  private async sample(s: SessionRecord, rt: SessionRuntime, input: Input<'sample'>): Promise<Output<'sample'>> {
    if (input.failsWith) throw Object.assign(new Error(input.failsWith.message), { code: input.failsWith.code });
    const eosTokenIds = this.state.resourceOf(s).model.eosTokenIds;
    const params = eosTokenIds && !input.params.eosTokenIds ? { ...input.params, eosTokenIds } : input.params;
    const pinned = input.fromCheckpoint ? await this.checkpoints.pinnedLearner(s, rt, input.fromCheckpoint) : undefined;
    const generator = pinned?.learner ?? rt.generator;
    const results = input.prompts.map((prompt) => ({
      sequences: generator.sample(prompt, params, input.numSamples),
      promptLogprobs: input.promptLogprobs ? generator.promptLogprobs(prompt) : undefined,
      policyVersion: pinned ? pinned.step : s.weightsVersion,
    }));
    const sampling = (s.sampling ??= { operations: 0, sequences: 0, repeated: 0, greedy: 0 });
    const digest = createHash('sha256')
      .update(JSON.stringify([input.prompts, params, input.numSamples, input.fromCheckpoint ?? null, results[0]?.policyVersion]))
      .digest('hex');
    rt.sampled ??= new Set();
    if (params.seed !== undefined && rt.sampled.has(digest)) sampling.repeated++;
    rt.sampled.add(digest);
    sampling.operations++;
    if (params.temperature === 0) sampling.greedy = (sampling.greedy ?? 0) + 1;
    sampling.sequences += results.reduce((a, r) => a + r.sequences.length, 0);
    return { kind: 'sample', results };
  }

  private async resetTrainer(s: SessionRecord, rt: SessionRuntime, input: Input<'trainer-reset'>): Promise<Output<'trainer-reset'>> {
    const learner = await this.state.models.create(learnerOptions(this.state.resourceOf(s).model, input.lora));
    this.replaceTrainer(s, rt, learner, input.lora);
    delete s.resumeFromCheckpointId;
    return { kind: 'trainer-reset', step: learner.step, loraRank: input.lora.rank };
  }

  private async loadCheckpoint(s: SessionRecord, rt: SessionRuntime, input: Input<'load-checkpoint'>): Promise<Output<'load-checkpoint'>> {
    const checkpoint = this.checkpoints.resolve(s, input.checkpoint);
    if (input.optimizer && !checkpoint.withOptimizer) {
      throw new LearnerInputError(`checkpoint ${checkpoint.name ?? checkpoint.id} holds no optimizer state; load its weights only`);
    }
    const lora: LoraSettings = { ...s.lora, rank: checkpoint.loraRank };
    const learner = await this.state.models.fromState(learnerOptions(this.state.resourceOf(s).model, lora), checkpoint.state, {
      optimizer: input.optimizer,
    });
    this.replaceTrainer(s, rt, learner, lora);
    s.resumeFromCheckpointId = checkpoint.id;
    return { kind: 'load-checkpoint', step: learner.step, checkpointId: checkpoint.id };
  }

  /** The trainer changes in place; the generators keep serving what they served (and remember its adapter). */
  private replaceTrainer(s: SessionRecord, rt: SessionRuntime, learner: TrainerModel, lora: LoraSettings): void {
    rt.learner.dispose();
    rt.learner = learner;
    s.generatorLora ??= s.lora;
    s.lora = lora;
  }
}

function forwardBackward(rt: SessionRuntime, input: Input<'forward-backward'>): Output<'forward-backward'> {
  const spec = input.loss;
  const loss =
    spec.type === 'cross_entropy'
      ? crossEntropyLoss(spec.weights)
      : spec.type === 'policy_gradient'
        ? policyGradientLoss(spec.config)
        : linearLogprobLoss(spec.gradients);
  const result = input.forwardOnly ? rt.learner.forward(input.sequences, loss) : rt.learner.forwardBackward(input.sequences, loss);
  const weights = spec.type === 'cross_entropy' ? spec.weights : spec.type === 'policy_gradient' ? spec.config.weights : undefined;
  const tokens = weights ? weights.flat().filter((w) => w !== 0).length : 0;
  const counted = weights ? weights.map((w) => w.map((v) => v !== 0)) : result.logprobs.map((l) => l.map(() => true));
  const mean = spec.type === 'policy_gradient' && spec.config.aggregation !== 'sum';
  return {
    kind: 'forward-backward',
    loss: result.loss,
    logprobs: result.logprobs,
    counted,
    tokens,
    returnOutputs: input.returnOutputs,
    ...(mean ? { reduction: 'mean' as const } : {}),
  };
}

/** The tokens an operation processed, on its session's count (what a per-token biller charges). */
function countTokens(s: SessionRecord, input: OperationInput, output: OperationOutput): void {
  const tokens = (s.tokens ??= { prefill: 0, sample: 0, train: 0 });
  const length = (sequences: { inputTokens: number[] }[]) => sequences.reduce((a, q) => a + q.inputTokens.length, 0);
  if (input.kind === 'forward-backward') tokens[input.forwardOnly ? 'prefill' : 'train'] += length(input.sequences);
  else if (input.kind === 'custom-forward-backward') tokens.train += length(input.sequences);
  else if (input.kind === 'sample' && output.kind === 'sample') {
    tokens.prefill += input.prompts.reduce((a, p) => a + p.length, 0);
    tokens.sample += output.results.reduce((a, r) => a + r.sequences.reduce((b, q) => b + q.tokens.length, 0), 0);
  }
}
