'use strict';
// The conformance GRPO round's reward: the completion's length in characters. A tiny random model never answers a
// sum, so an answer-matching reward would be 0 for every completion and every group would be dropped; a length
// differs between the completions of a group, so each step trains.
exports.reward = (completion) => completion.length;
