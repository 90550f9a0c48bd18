"""Losses the tests measure the loss activity and the torch adapter by (DPO and cross-entropy, in numpy), and a batch
as the TypeScript side writes it. Free of temporalio and torch: tests_torch/ imports it too."""

from __future__ import annotations

from typing import Any

import numpy as np

import roundhouse

BETA = 0.1
PROMPT_TOKENS = 2
# Two preference rows, with the reference model's logprob of each completion.
ROWS: list[dict[str, Any]] = [
    {"prompt": "2+2?", "chosen": "4", "rejected": "5", "reference": {"chosen": -3.1, "rejected": -2.7}},
    {"prompt": "3+3?", "chosen": "6", "rejected": "9", "reference": {"chosen": -2.2, "rejected": -2.9}},
]


def batch_document(mode: str = "train", nudge: float = 0.0) -> dict[str, Any]:
    """Datums 0-3: row 0's chosen (5 tokens) and rejected (4), then row 1's, each starting with PROMPT_TOKENS prompt
    tokens (weight 0); `nudge` moves datum 0's last logprob. The context names step 4 (the 0-based step 3)."""
    rng = np.random.default_rng(7)
    datums: list[dict[str, Any]] = [
        {
            "row": row,
            "completion": completion,
            "logprobs": (-rng.uniform(0.1, 2.0, length)).tolist(),
            "weights": [0.0] * PROMPT_TOKENS + [1.0] * (length - PROMPT_TOKENS),
        }
        for row in range(len(ROWS))
        for completion, length in (("chosen", 5), ("rejected", 4))
    ]
    datums[0]["logprobs"][-1] += nudge
    step = 3 if mode == "train" else None
    return {"step": step, "mode": mode, "rows": ROWS, "datums": datums, "context": {"step": 4, "lineage": 0}}


def dpo(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    """The mean over rows of -log sigmoid(margin), the margin being BETA times how much more the policy than the
    reference prefers the chosen completion to the rejected one."""
    pairs = batch.by_row()
    margins = np.array(
        [
            BETA
            * (
                (pair["chosen"].completion_logprob() - row["reference"]["chosen"])
                - (pair["rejected"].completion_logprob() - row["reference"]["rejected"])
            )
            for pair, row in zip(pairs, batch.rows, strict=True)
        ]
    )
    # d loss / d margin is -sigmoid(-margin) / rows; a margin grows with the chosen logprobs, falls with the rejected.
    slope = -BETA / (1.0 + np.exp(margins)) / len(pairs)
    sign = {"chosen": 1.0, "rejected": -1.0}
    gradients = [sign[d.completion] * slope[d.row_index] * d.weights for d in batch]
    metrics = {"margin": float(np.mean(margins)), "accuracy": float(np.mean(margins > 0))}
    return roundhouse.LossOutput(float(np.mean(np.logaddexp(0.0, -margins))), gradients, metrics)


def cross_entropy(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    """Supervised: the mean negative logprob of the completions' tokens."""
    tokens = sum(d.tokens for d in batch)
    loss = -sum(d.completion_logprob() for d in batch) / tokens
    return roundhouse.LossOutput(loss, [-d.weights / tokens for d in batch], {"tokens": tokens})
