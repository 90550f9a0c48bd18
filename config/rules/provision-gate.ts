// Pure (no Temporal, no Node): the provision gate's names, shared by its workflow and the activity that calls it.

/**
 * One gate serializes trainer creates per (provider endpoint + account, model) where a created resource carries no
 * owner tag and its create takes no idempotency key (Together model resources): while one round holds it, no other
 * round creates, so a resource that appears then is the holder's.
 */
export const PROVISION_GATE_WORKFLOW = 'provisionGateWorkflow';
export const ACQUIRE_GATE_UPDATE = 'acquireProvisionGate';
export const RELEASE_GATE_UPDATE = 'releaseProvisionGate';
export const NOTE_LISTING_UPDATE = 'noteProvisionListing';
/** The failure type of an acquire the gate rejects because another owner holds it: ask again shortly. */
export const GATE_BUSY = 'ProvisionGateBusy';

/**
 * What a gate serializes: one deployment's (its task queue's) creates on one endpoint + account, of one model.
 * `account` names the endpoint and account without revealing the key (the provider's fingerprint, a hash): secrets
 * never enter workflow ids, inputs or histories. The task queue is part of it because the gate runs there: a
 * deployment is a task queue, and its workers are the ones that run its gate.
 */
export interface ProvisionGateKey {
  taskQueue: string;
  provider: string;
  account: string;
  model: string;
}

export function provisionGateWorkflowId(gate: ProvisionGateKey): string {
  return `provision-gate:${gate.taskQueue}:${gate.provider}:${gate.account}:${gate.model}`;
}
