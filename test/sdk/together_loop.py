#!/usr/bin/env python3
"""Runs the documented Together post-training loops with the official `together` SDK, unchanged but for the base
URL and key (TOGETHER_BASE_URL, TOGETHER_API_KEY), and prints one JSON summary line for the test to check.

1. Minimal loop: create a model resource, a session, forward_backward + optim_step, an inference checkpoint.
2. Batch loop with sampling: sample_batch groups, keep the best completion per prompt, train on it with
   cross-entropy, weights_sync so the generators serve the new policy, compute_logprobs, a training checkpoint,
   list checkpoints, and resume a new session from that checkpoint.
"""

import json
import os

from together import Together
from together.post_training import ModelResourcesClient

BASE_URL = os.environ["TOGETHER_BASE_URL"]
API_KEY = os.environ["TOGETHER_API_KEY"]
MODEL = os.environ.get("TOGETHER_BASE_MODEL", "Qwen/Qwen3.8-27B")  # the model of Together's training-loop guide
STEPS = 15


def model_input(tokens):
    return {"chunks": [{"encoded_text": {"tokens": tokens}}]}


def sft_sample(prompt, completion):
    full = prompt + completion
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(completion)
    return {
        "model_input": model_input(full[:-1]),
        "loss_fn_inputs": {
            "target_tokens": {"data": full[1:], "dtype": "int64"},
            "weights": {"data": weights, "dtype": "float32"},
        },
    }


def main():
    summary = {}
    client = Together(api_key=API_KEY, base_url=BASE_URL)
    summary["models"] = [m.base_model for m in client.post_training.supported_models.get().data]
    quote = client.post_training.model_resources.estimate_cost(
        base_model=MODEL, compute_config={"num_generator_replicas": 1}
    )
    summary["price_per_hour"] = quote.price_per_hour

    with ModelResourcesClient.create(
        api_key=API_KEY,
        base_url=BASE_URL,
        base_model=MODEL,
        lora_enabled=True,
        compute_config={"num_generator_replicas": 1},
        interval=0.2,
    ) as resources:
        summary["resource_id"] = resources.model_resources_id

        # 1. The minimal loop.
        with resources.create_session(display_name="minimal-loop", lora_config={"rank": 8}, interval=0.2) as session:
            samples = [sft_sample([1, 2, 3, 4], [5, 6, 7]), sft_sample([1, 9, 3], [8, 8, 2])]
            losses = []
            for _ in range(3):
                fb = session.trainer.forward_backward(samples=samples, loss={"type": "LOSS_TYPE_CROSS_ENTROPY"})
                opt = session.trainer.optim_step(adam_params={"learning_rate": 0.05})
                losses.append(fb.loss)
            summary["minimal_losses"] = losses
            summary["minimal_step"] = int(opt.step)
            ckpt = session.create_inference_checkpoint()
            summary["inference_checkpoint"] = ckpt.id
            assert ckpt.registration.adapter.id, "inference checkpoint has no adapter registration"

        # 2. A batch loop with sampling.
        prompts = [[11, 12, 13], [21, 22, 23, 24], [31, 32]]
        targets = {0: [41, 42], 1: [51, 52], 2: [61, 62]}
        with resources.create_session(display_name="batch-loop", lora_config={"rank": 8}, interval=0.2) as session:
            trainer, generator = session.trainer, session.generator
            rewards = []
            for step in range(STEPS):
                results = generator.sample_batch(
                    [model_input(p) for p in prompts],
                    num_samples=2,
                    sampling_params={"max_tokens": 2, "temperature": 1.0, "seed": step},
                )
                assert len(results) == len(prompts)
                batch = []
                step_reward = 0
                for i, (prompt, result) in enumerate(zip(prompts, results, strict=False)):
                    assert result.sequences[0].stop_reason in ("STOP_REASON_LENGTH", "STOP_REASON_STOP")
                    sampled = [[int(t) for t in s.tokens] for s in result.sequences]
                    step_reward += sum(s == targets[i] for s in sampled)
                    # the "grader" supplies the right answer for training, as in rejection-sampling SFT
                    batch.append(sft_sample(prompt, targets[i]))
                rewards.append(step_reward)
                trainer.forward_backward(samples=batch, loss={"type": "LOSS_TYPE_CROSS_ENTROPY"})
                trainer.optim_step(
                    adam_params={"learning_rate": 0.02, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip_norm": 1.0}
                )
                ws = trainer.weights_sync()
            summary["weights_version"] = int(ws.weights_version)
            final = generator.sample_batch(
                [model_input(p) for p in prompts], num_samples=1, sampling_params={"max_tokens": 2, "temperature": 0.0}
            )
            summary["greedy_correct"] = sum(
                [int(t) for t in r.sequences[0].tokens] == targets[i] for i, r in enumerate(final)
            )
            summary["policy_version"] = final[0].policy_segments[0].version
            lps = generator.compute_logprobs(model_input([11, 12, 13, 41, 42]))
            summary["prompt_logprobs_len"] = len(lps)
            tckpt = session.create_training_checkpoint()
            summary["training_checkpoint_step"] = int(tckpt.step)
            session_id = session.session_id

        listed = client.post_training.checkpoints.list(session_id=session_id, type="CHECKPOINT_TYPE_TRAINING")
        summary["listed_checkpoints"] = [c.id for c in listed.data]

        # Resume: a new session from the training checkpoint continues at its step.
        with resources.create_session(resume_from_checkpoint_id=tckpt.id, interval=0.2) as resumed:
            summary["resumed_step"] = int(resumed.retrieve().step)
            opt = resumed.trainer.optim_step(adam_params={"learning_rate": 0.0})
            summary["resumed_next_step"] = int(opt.step)

    print("SUMMARY " + json.dumps(summary))


if __name__ == "__main__":
    main()
