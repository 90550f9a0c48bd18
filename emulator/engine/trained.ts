import type { OperationInput, SessionRecord } from './records';

/**
 * What the trainer received, datum by datum: each training pass's (forward_backward, custom or not) sequences, the
 * weights the loss counted them with and the sampler logprobs it was given. Opt-in (`EngineOptions.trainedBatches`:
 * how many passes a session keeps, the oldest dropped first), so a test can compare the tokens a round trained on with
 * what it sampled; off, nothing is kept.
 */

export interface TrainedDatum {
  inputTokens: number[];
  targetTokens: number[];
  /** Per target position: the loss's weight (custom losses: 1 where a gradient was given, else 0). */
  weights: number[];
  /** Policy losses: the sampler's logprob per target position, as the client sent it. */
  samplingLogprobs?: number[];
}

export interface TrainedBatch {
  /** The pass's idempotency key (Roundhouse's: `<campaign>/r<round>/…/s<step>/forward-backward`). */
  key: string;
  datums: TrainedDatum[];
}

export interface TrainedListing {
  sessions: { id: string; resourceId: string; displayName: string | null; batches: TrainedBatch[] }[];
}

export class TrainedLog {
  private readonly bySession = new Map<string, TrainedBatch[]>();

  constructor(private readonly keep: number) {}

  /** Notes a training pass that completed (forward-only passes train nothing and are not noted). */
  note(session: SessionRecord, key: string, input: OperationInput): void {
    if (this.keep <= 0) return;
    const datums = trainedDatums(input);
    if (!datums) return;
    const batches = this.bySession.get(session.id) ?? [];
    batches.push({ key, datums });
    if (batches.length > this.keep) batches.splice(0, batches.length - this.keep);
    this.bySession.set(session.id, batches);
  }

  listing(sessions: Iterable<SessionRecord>): TrainedListing {
    return {
      sessions: [...sessions]
        .filter((s) => this.bySession.has(s.id))
        .map((s) => ({ id: s.id, resourceId: s.resourceId, displayName: s.displayName ?? null, batches: this.bySession.get(s.id)! })),
    };
  }
}

function trainedDatums(input: OperationInput): TrainedDatum[] | undefined {
  if (input.kind === 'custom-forward-backward')
    return input.sequences.map((q, i) => ({
      inputTokens: q.inputTokens,
      targetTokens: q.targetTokens,
      weights: q.targetTokens.map((_t, k) => ((input.gradients[i]?.[k] ?? 0) !== 0 ? 1 : 0)),
    }));
  if (input.kind !== 'forward-backward' || input.forwardOnly) return undefined;
  const loss = input.loss;
  return input.sequences.map((q, i) => ({
    inputTokens: q.inputTokens,
    targetTokens: q.targetTokens,
    weights:
      loss.type === 'cross_entropy'
        ? (loss.weights[i] ?? [])
        : loss.type === 'policy_gradient'
          ? (loss.config.weights[i] ?? [])
          : q.targetTokens.map((_t, k) => ((loss.gradients[i]?.[k] ?? 0) !== 0 ? 1 : 0)),
    ...(loss.type === 'policy_gradient' ? { samplingLogprobs: loss.config.samplingLogprobs[i] ?? [] } : {}),
  }));
}
