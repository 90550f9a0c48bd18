import type { ProviderSpec } from '../config/io/spec';
import type { TrainingProvider } from '../providers/types';

/** What the activities need from the worker: providers (holding API keys), and whether the worker is draining. */
export interface ActivityDeps {
  providerFor(spec: ProviderSpec): Promise<TrainingProvider>;
  /** True once the worker is shutting down: training segments stop submitting steps and return their cursor. */
  draining?(): boolean;
}
