"""The official tinker SDK, unchanged, against the emulator: a pipelined supervised loop modelled on the cookbook's
(forward_backward and optim_step submitted back to back, the next batch submitted before the last one's results are
read), save_state, a new client resumed from that state with its optimizer, and the RL losses' forward_backward.
Only TINKER_BASE_URL and TINKER_API_KEY point it at the emulator. Prints one `SUMMARY {json}` line."""

import json
import os
import time

import tinker
from tinker import types

started = time.time()
MODEL = "roundhouse/tiny-chat"

# Three short "conversations" in token space: the prompt is not trained (weight 0), the answer is.
SEQUENCES = [[1, 40, 41, 42, 7, 300, 301], [1, 50, 51, 7, 310, 311, 312], [1, 60, 61, 62, 63, 7, 320]]
ANSWER_FROM = [4, 3, 5]  # index of the first answer token in each sequence


def datum(tokens, answer_from, **extra):
    model_input, targets = tokens[:-1], tokens[1:]
    weights = [1.0 if i + 1 >= answer_from else 0.0 for i in range(len(targets))]
    inputs = {"target_tokens": targets, "weights": weights}
    inputs.update(extra)
    return types.Datum(model_input=types.ModelInput.from_ints(model_input), loss_fn_inputs=inputs)


batches = [[datum(s, a)] for s, a in zip(SEQUENCES, ANSWER_FROM, strict=False)]
service = tinker.ServiceClient(base_url=os.environ["TINKER_BASE_URL"], api_key=os.environ["TINKER_API_KEY"])
trainer = service.create_lora_training_client(base_model=MODEL, rank=8)
info = trainer.get_info()
adam = types.AdamParams(learning_rate=5e-2)

# Pipelined: submit batch k+1 (forward_backward then optim_step, back to back) before reading batch k.
losses = []
steps = 0
pending = None
for _epoch in range(6):
    for batch in batches:
        submitted = (trainer.forward_backward(batch, "cross_entropy"), trainer.optim_step(adam))
        steps += 1
        if pending is not None:
            fb, _ = pending
            losses.append(fb.result().metrics["loss:sum"])
        pending = submitted
losses.append(pending[0].result().metrics["loss:sum"])
pending[1].result()

evaluated = trainer.forward([d for b in batches for d in b], "cross_entropy").result()
logprobs = [list(o["logprobs"].data) for o in evaluated.loss_fn_outputs]
state = trainer.save_state("sft-state").result()

# A second client (its own session) resumes from the saved state with its optimizer and trains on.
service2 = tinker.ServiceClient(base_url=os.environ["TINKER_BASE_URL"], api_key=os.environ["TINKER_API_KEY"])
resumed = service2.create_training_client_from_state_with_optimizer(state.path)
resumed_eval = resumed.forward([d for b in batches for d in b], "cross_entropy").result()
resumed.forward_backward(batches[0], "cross_entropy").result()
resumed.optim_step(adam).result()

# The RL losses as Tinker names them: the sampler's logprobs and the advantages per target token.
rl_datum = datum(SEQUENCES[0], ANSWER_FROM[0], logprobs=[-1.0] * 6, advantages=[0.5] * 6)
rl_datum.loss_fn_inputs.pop("weights")
importance = trainer.forward_backward([rl_datum], "importance_sampling").result()
ppo = trainer.forward_backward([rl_datum], "ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}).result()
trainer.optim_step(adam).result()

# Sampling from the trained weights, and on-policy agreement: the logprobs the sampler reports for its tokens are
# the ones the trainer computes for the same tokens (no step between, so the weights are the same).
sampler = trainer.save_weights_and_get_sampling_client()
prompt = [1, 40, 41, 42, 7]
drawn = sampler.sample(
    types.ModelInput.from_ints(prompt),
    num_samples=2,
    sampling_params=types.SamplingParams(max_tokens=4, temperature=1.0, seed=5),
    include_prompt_logprobs=True,
).result()
first = drawn.sequences[0]
full = prompt + list(first.tokens)
scored = trainer.forward(
    [
        types.Datum(
            model_input=types.ModelInput.from_ints(full[:-1]),
            loss_fn_inputs={"target_tokens": full[1:], "weights": [1.0] * (len(full) - 1)},
        )
    ],
    "cross_entropy",
).result()
trainer_logprobs = list(scored.loss_fn_outputs[0]["logprobs"].data)[len(prompt) - 1 :]
on_policy_gap = max(abs(a - b) for a, b in zip(trainer_logprobs, first.logprobs, strict=False))
prompt_logprob_gap = max(
    abs(a - b)
    for a, b in zip(
        list(scored.loss_fn_outputs[0]["logprobs"].data)[: len(prompt) - 1], drawn.prompt_logprobs[1:], strict=False
    )
)
computed = sampler.compute_logprobs(types.ModelInput.from_ints(prompt)).result()

# An RL loop after the cookbook's rl_loop: sample a group, reward it, importance_sampling on the sampler's logprobs.
TARGET = 300
rewards = []
for _iteration in range(3):
    policy = trainer.save_weights_and_get_sampling_client()
    group = policy.sample(
        types.ModelInput.from_ints(prompt),
        num_samples=4,
        sampling_params=types.SamplingParams(max_tokens=3, temperature=1.0),
    ).result()
    scores = [sum(1.0 for t in q.tokens if t == TARGET) / len(q.tokens) for q in group.sequences]
    mean = sum(scores) / len(scores)
    rewards.append(mean)
    batch = []
    for q, score in zip(group.sequences, scores, strict=False):
        tokens = prompt + list(q.tokens)
        n_prompt = len(prompt) - 1
        batch.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": tokens[1:],
                    "logprobs": [0.0] * n_prompt + list(q.logprobs),
                    "advantages": [0.0] * n_prompt + [score - mean] * len(q.tokens),
                },
            )
        )
    trainer.forward_backward(batch, "importance_sampling").result()
    trainer.optim_step(adam).result()

bad = None
try:
    trainer.forward_backward([datum([1, 99999, 2], 1)], "cross_entropy").result()
except Exception as err:  # a token outside the vocabulary: the future fails, as a user error
    bad = type(err).__name__

# The REST listings the cookbook and CLI read: runs (with their last checkpoint), a run's checkpoints, a session.
rest = service.create_rest_client()
runs = rest.list_training_runs().result()
run = rest.get_training_run(trainer.model_id).result()
checkpoints = rest.list_checkpoints(trainer.model_id).result()
session_info = rest.get_session(trainer.model_id.split(":")[0]).result()

service2.close("success").result()
service.close("success").result()
print(
    "SUMMARY "
    + json.dumps(
        {
            "model_id": trainer.model_id,
            "resumed_model_id": resumed.model_id,
            "info_model": info.model_data.model_name,
            "lora_rank": info.lora_rank,
            "steps": steps,
            "first_loss": losses[0],
            "last_loss": losses[-1],
            "evaluated": len(logprobs),
            "logprob_lengths": [len(lp) for lp in logprobs],
            "eval_loss": evaluated.metrics["loss:sum"],
            "resumed_eval_loss": resumed_eval.metrics["loss:sum"],
            "state_path": state.path,
            "importance_loss": importance.metrics["loss:sum"],
            "ppo_loss": ppo.metrics["loss:sum"],
            "bad_token_error": bad,
            "sampled": [len(q.tokens) for q in drawn.sequences],
            "on_policy_gap": on_policy_gap,
            "prompt_logprob_gap": prompt_logprob_gap,
            "computed_logprobs": len(computed),
            "rl_iterations": len(rewards),
            "listed_runs": sorted(r.training_run_id for r in runs.training_runs),
            "run_last_checkpoint": run.last_checkpoint.tinker_path if run.last_checkpoint else None,
            "checkpoint_types": sorted(c.checkpoint_type for c in checkpoints.checkpoints),
            "session_runs": list(session_info.training_run_ids),
            "seconds": round(time.time() - started, 1),
        }
    )
)
