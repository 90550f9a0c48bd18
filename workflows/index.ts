// The one module the worker bundles: every workflow type is a named export here.
export { campaignChecksWorkflow, preflightWorkflow } from './preflight';
export { roundWorkflow } from './round';
export { campaignWorkflow } from './campaign';
export { reaperWorkflow } from './reaper';
export { provisionGateWorkflow } from './provision-gate';
export { pythonCallWorkflow } from './python';
export { notifyWorkflow } from './notify';
