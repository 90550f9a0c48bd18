"""One round of Baseten Loops' "programmatic training" (the guide's campaign.py) with the official
`baseten-loops` SDK, unchanged: it finds the service through LOOPS_BASE_URL and BASETEN_API_KEY only; the
trainer and sampler URLs come back from the control plane.

validate data -> capabilities -> trainer -> baseline eval loss -> epochs of forward_backward + optim_step
(pipelined) -> save_state -> save_weights_for_sampler -> sample and score -> checkpoint files -> resume from
the state with its optimizer -> deactivate every run (REST: the SDK has no deactivate call).

Prints one line `SUMMARY {json}` for the test to assert on. Token ids are a fake tokenizer's (no download).
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import zlib

import httpx
from baseten.loops import AdamParams, Datum, ModelInput, SamplingParams, ServiceClient, TensorData

BASE_MODEL = "Qwen/Qwen3.5-2B"  # the guide's model (the emulator serves it with Qwen3.5's 248,320-id vocabulary)
BOS, EOS, SEP = 1, 2, 3
LABELS = {"access": 11, "billing": 12}
TOKEN_LABELS = {v: k for k, v in LABELS.items()}


def fake_tokenize(text: str) -> list[int]:
    return [100 + zlib.crc32(w.lower().encode()) % 3900 for w in text.split()]


def prompt_tokens(ticket: str) -> list[int]:
    return [BOS, SEP, *fake_tokenize(ticket)]


def sft_datum(ticket: str, label: str) -> Datum:
    """Baseten's cross_entropy convention: the whole sequence in, targets shifted by the caller, -100 masked."""
    p = prompt_tokens(ticket)
    tokens = [*p, LABELS[label], EOS]
    targets = [tokens[i + 1] if i + 1 >= len(p) else -100 for i in range(len(tokens) - 1)] + [-100]
    return Datum(
        model_input=ModelInput.from_ints(tokens),
        loss_fn_inputs={"target_tokens": TensorData(data=targets, dtype="int64", shape=[len(targets)])},
    )


TRAIN = [
    ("I cannot reset my password", "access"),
    ("locked out after too many attempts", "access"),
    ("my 2fa code never arrives", "access"),
    ("SSO redirect fails at login", "access"),
    ("please explain this charge", "billing"),
    ("I was billed twice, need a refund", "billing"),
    ("where do I download my invoice", "billing"),
    ("card declined, update payment", "billing"),
]


def validate(rows, max_len):
    for i, (text, label) in enumerate(rows):
        if not text.strip() or label not in LABELS or len(prompt_tokens(text)) + 2 > max_len:
            raise ValueError(f"train[{i}] is invalid")


def token_nll(out) -> float:
    values = [v for o in out.loss_fn_outputs for v in o["logprobs"].data if v is not None and not math.isnan(v)]
    return -sum(values) / max(len(values), 1)


def deactivate_all(base_url: str, api_key: str, run_ids: list[str]) -> dict[str, str]:
    headers = {"Authorization": f"Api-Key {api_key}"}
    with httpx.Client(timeout=60.0) as c:
        for run_id in run_ids:
            c.post(f"{base_url}/v1/loops/runs/{run_id}/deactivate", headers=headers).raise_for_status()
        return {
            rid: c.get(f"{base_url}/v1/loops/runs/{rid}", headers=headers).json()["run"]["status"]["name"]
            for rid in run_ids
        }


def main() -> int:
    base_url = os.environ["LOOPS_BASE_URL"].rstrip("/")
    api_key = os.environ["BASETEN_API_KEY"]
    epochs = int(os.environ.get("ROUND_EPOCHS", "6"))
    lr = float(os.environ.get("ROUND_LR", "0.02"))
    summary: dict = {}
    runs: list[str] = []
    started = time.monotonic()
    try:
        service = ServiceClient()
        summary["session_id"] = service.session_id
        caps = service.get_server_capabilities()
        model = next(m for m in caps.supported_models if m.model_name == BASE_MODEL)
        validate(TRAIN, model.max_context_length or 8192)

        training = service.create_lora_training_client(
            BASE_MODEL, rank=8, seed=0, max_seq_len=512, ready_timeout=60, name="sdk-round"
        )
        runs.append(training.run_id)
        summary["run_id"] = training.run_id
        data = [sft_datum(ticket, label) for ticket, label in TRAIN]

        baseline = training.forward(data, loss_fn="cross_entropy").result()
        summary["baseline_loss"] = baseline.loss
        summary["baseline_token_nll"] = token_nll(baseline)
        summary["masked_are_null"] = baseline.loss_fn_outputs[0]["logprobs"].data[0] is None

        rng = random.Random(0)
        summary["train_losses"] = []
        for _ in range(epochs):
            order = list(range(len(data)))
            rng.shuffle(order)
            for b in range(0, len(order), 4):
                fb = training.forward_backward([data[i] for i in order[b : b + 4]], loss_fn="cross_entropy")
                opt = training.optim_step(
                    AdamParams(learning_rate=lr)
                )  # pipelined: both submitted before either is awaited
                summary["train_losses"].append(fb.result().loss)
                summary["last_optim"] = opt.result().metrics
        summary["trained_loss"] = training.forward(data).result().loss

        state = training.save_state("round-state").result()
        weights = training.save_weights_for_sampler("round-sampler").result()
        summary["state_path"], summary["sampler_path"], summary["sampler_version"] = (
            state.path,
            weights.path,
            weights.version,
        )

        sampler = training.create_sampling_client(weights.path)
        predictions = []
        for text, label in TRAIN:
            r = sampler.sample(
                ModelInput.from_ints(prompt_tokens(text)),
                num_samples=1,
                sampling_params=SamplingParams(max_tokens=2, temperature=0.0, stop=[EOS], seed=0),
            )
            tokens = r.sequences[0].tokens
            predictions.append(
                {
                    "expected": label,
                    "predicted": TOKEN_LABELS.get(tokens[0]) if tokens else None,
                    "stop_reason": r.sequences[0].stop_reason,
                    "policy_version": r.policy_version,
                }
            )
        summary["correct"] = sum(p["expected"] == p["predicted"] for p in predictions)
        summary["policy_versions"] = sorted({p["policy_version"] for p in predictions})

        summary["checkpoints"] = sorted((c.checkpoint_id, c.target) for c in training.list_checkpoints())
        files = training.get_checkpoint_archive_url(name="round-sampler", target="sampler")
        summary["sampler_files"] = sorted(f.relative_file_name for f in files.presigned_urls)

        resumed = service.create_training_client_from_state_with_optimizer(state.path)
        runs.append(resumed.run_id)
        summary["resumed_run_id"] = resumed.run_id
        summary["resumed_step"] = resumed.policy_version
        resumed.forward_backward(data[:4]).result()
        summary["resumed_next_step"] = resumed.optim_step(AdamParams(learning_rate=lr)).result().metrics["step"]
        for c in (sampler, training, resumed):
            c.close()
        summary["status"] = "ok"
    except Exception as exc:
        summary["status"] = f"failed: {type(exc).__name__}: {exc}"
    finally:
        summary["cleanup"] = deactivate_all(base_url, api_key, runs) if runs else {}
        summary["seconds"] = round(time.monotonic() - started, 2)
        print("SUMMARY " + json.dumps(summary), flush=True)
    return 0 if summary.get("status") == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
