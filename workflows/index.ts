// The one module the worker bundles: every workflow type is a named export here.
export { campaignChecksWorkflow, preflightWorkflow } from './preflight';
export { roundWorkflow } from './round/round';
export { sweepWorkflow } from './sweep/sweep';
export { campaignWorkflow } from './campaign/campaign';
export { reaperWorkflow } from './reaper';
export { provisionGateWorkflow } from './provision-gate/provision-gate';
export { pythonCallWorkflow } from './python/python';
export { notifyWorkflow } from './notify';
