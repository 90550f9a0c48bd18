"""Loss functions for Roundhouse's custom rounds (`round.kind: custom`), trained through the providers'
custom-loss pass.

Each function gets one step's batch: every datum's target-token logprobs from the trainer's `forward` (prompt tokens
included, weight 0), its row (every field of the data row) and its completion's name. It returns the loss and
d loss / d logprob for every token; Roundhouse sends those gradients with `custom_forward_backward`.

    python -m roundhouse worker examples/custom-loss/losses.py --task-queue losses
"""

from __future__ import annotations

import numpy as np

import roundhouse


def _log_sigmoid(x: float) -> float:
    return float(-np.logaddexp(0.0, -x))


def _sigmoid(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-x)))


@roundhouse.loss
def simpo(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    """SimPO (Meng et al., 2024): no reference model; each answer's logprob averaged over its tokens, and a target
    margin gamma:  L = -log sigmoid(beta/|c|*log pi(c) - beta/|r|*log pi(r) - gamma), with beta = 2 and gamma = 0.5
    (a row may set its own `beta`)."""
    gradients = [np.zeros_like(d.logprobs) for d in batch]
    index = {id(d): i for i, d in enumerate(batch)}
    loss = 0.0
    margins = []
    pairs = batch.by_row()
    for group in pairs:
        chosen, rejected = group["chosen"], group["rejected"]
        beta = float(chosen.row.get("beta", 2.0))
        gamma = 0.5
        c = chosen.completion_logprob() / chosen.tokens
        r = rejected.completion_logprob() / rejected.tokens
        z = beta * (c - r) - gamma
        loss -= _log_sigmoid(z) / len(pairs)
        g = beta * _sigmoid(-z) / len(pairs)
        gradients[index[id(chosen)]] = -g * chosen.weights / chosen.tokens
        gradients[index[id(rejected)]] = g * rejected.weights / rejected.tokens
        margins.append(c - r)
    return roundhouse.LossOutput(
        loss=loss,
        gradients=gradients,
        metrics={
            "mean_logprob_margin": float(np.mean(margins)),
            "preference_accuracy": float(np.mean([m > 0 for m in margins])),
        },
    )


@roundhouse.loss
def dpo(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    """DPO (Rafailov et al., 2023), as Roundhouse's built-in `round.kind: dpo` computes it, with beta = 0.5 (the
    support-ticket example's): needs `round.custom.reference: start`, whose logprobs are each datum's reference.
    L = -log sigmoid(beta*((pi_c - ref_c) - (pi_r - ref_r))), averaged over the step's pairs."""
    beta = 0.5
    gradients = [np.zeros_like(d.logprobs) for d in batch]
    index = {id(d): i for i, d in enumerate(batch)}
    pairs = batch.by_row()
    loss = 0.0
    margins = []
    for group in pairs:
        chosen, rejected = group["chosen"], group["rejected"]
        assert chosen.reference_logprobs is not None and rejected.reference_logprobs is not None, (
            "set round.custom.reference: start"
        )
        margin = (chosen.completion_logprob() - float(np.dot(chosen.reference_logprobs, chosen.weights))) - (
            rejected.completion_logprob() - float(np.dot(rejected.reference_logprobs, rejected.weights))
        )
        z = beta * margin
        loss -= _log_sigmoid(z) / len(pairs)
        g = beta * _sigmoid(-z) / len(pairs)
        gradients[index[id(chosen)]] = -g * chosen.weights
        gradients[index[id(rejected)]] = g * rejected.weights
        margins.append(margin)
    return roundhouse.LossOutput(
        loss=loss,
        gradients=gradients,
        metrics={"margin": float(np.mean(margins)), "preference_accuracy": float(np.mean([m > 1e-3 for m in margins]))},
    )


@roundhouse.loss
def weighted_cross_entropy(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    """Cross-entropy on the answer tokens with a weight per row (its `weight` field, default 1), normalised by the
    weighted token count: rows that matter more (rarer classes, harder cases) pull harder."""
    weights = np.array([float(d.row.get("weight", 1.0)) for d in batch])
    total = float(sum(w * d.tokens for w, d in zip(weights, batch, strict=True)))
    loss = -sum(w * d.completion_logprob() for w, d in zip(weights, batch, strict=True)) / total
    gradients = [-w * d.weights / total for w, d in zip(weights, batch, strict=True)]
    return roundhouse.LossOutput(
        loss=float(loss),
        gradients=gradients,
        # The unweighted figure beside the weighted loss: what plain cross-entropy would report.
        metrics={"logprob_per_token": float(sum(d.completion_logprob() for d in batch) / sum(d.tokens for d in batch))},
    )


@roundhouse.loss
def cispo(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    """CISPO (MiniMax-M1, 2025) for a GRPO round (`round.grpo.loss: { kind: python, name: cispo, … }`): every sampled
    token keeps its gradient, weighted by its importance ratio clipped from above and held constant:
    L = -sum_t sg(min(r_t, 1 + eps)) * A_t * log pi(t) / T, with r_t = pi(t) / pi_sampler(t), eps = 0.2 and T the
    sampled tokens."""
    epsilon = 0.2
    tokens = sum(d.tokens for d in batch)
    loss = 0.0
    clipped = 0
    gradients = []
    for d in batch:
        assert d.advantages is not None and d.sampler_logprobs is not None, "cispo trains on sampled completions (grpo)"
        ratio = np.exp(d.logprobs - d.sampler_logprobs)
        weight = np.minimum(ratio, 1 + epsilon) * d.advantages * d.weights
        clipped += int(((ratio > 1 + epsilon) & (d.weights > 0)).sum())
        loss -= float(np.dot(weight, d.logprobs)) / tokens
        gradients.append(-weight / tokens)
    return roundhouse.LossOutput(loss=loss, gradients=gradients, metrics={"clipped_share": clipped / max(1, tokens)})
