// Every activity the worker registers, as named exports.
export { describeWorker } from './worker-info';
