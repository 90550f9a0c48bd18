import { RoundhouseFailure } from '../config/rules/failures';
import type { TrainingProvider } from '../providers/types';
import { readJson, writeJsonAtomic } from './files';

/**
 * A round's reference logprobs (`round-N.reference-logprobs.json`): the starting weights' logprobs of every train and
 * eval item, computed once before the first step, for the data they were computed on. DPO keeps each pair's two sums;
 * a custom round each completion's per-token logprobs. The workflow holds the file's path, never the numbers.
 */
export interface ReferenceFile<T> {
  trainSha256: string;
  evalSha256: string;
  /** Per train and eval item, in file order. */
  train: T[];
  eval: T[];
}

type Hashes = { trainSha256: string; evalSha256: string };

/** The file, when it holds the reference of this data. */
export async function readReference<T>(file: string, data: Hashes): Promise<ReferenceFile<T> | undefined> {
  const ref = await readJson<ReferenceFile<T>>(file);
  return ref && ref.trainSha256 === data.trainSha256 && ref.evalSha256 === data.evalSha256 ? ref : undefined;
}

/** The reference a round computed before its first step; missing after training began, the round cannot go on. */
export async function requireReference<T>(file: string, data: Hashes, needs: string): Promise<ReferenceFile<T>> {
  const ref = await readReference<T>(file, data);
  if (!ref) throw new RoundhouseFailure('ReferenceLogprobsMissing', `reference logprobs ${file} are missing or for other data; ${needs}`);
  return ref;
}

/**
 * Computes the reference once, under the round's starting weights: a retry finds the file. If the file is gone after
 * training began, the starting weights are no longer the session's: that fails the round rather than compute the
 * reference of other weights. Returns whether it computed it now.
 */
export async function computeReferenceOnce<T>(
  input: { outputPath: string; sessionId: string; stepOffset: number },
  provider: TrainingProvider,
  data: Hashes,
  of: (which: 'train' | 'eval') => Promise<T[]>,
): Promise<boolean> {
  if (await readReference<T>(input.outputPath, data)) return false;
  const session = await provider.getSession(input.sessionId);
  if (session.step !== input.stepOffset)
    throw new RoundhouseFailure(
      'ReferenceLogprobsMissing',
      `reference logprobs ${input.outputPath} are missing and the session already trained ${session.step - input.stepOffset} steps`,
    );
  const reference: ReferenceFile<T> = {
    trainSha256: data.trainSha256,
    evalSha256: data.evalSha256,
    train: await of('train'),
    eval: await of('eval'),
  };
  await writeJsonAtomic(input.outputPath, reference);
  return true;
}
