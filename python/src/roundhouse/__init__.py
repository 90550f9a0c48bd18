"""Roundhouse's Python side: the user's rewards, scorers, data policies, environments and losses as durable activities
on a Python worker.

Register plain functions (sync or async) and start a worker on the task queue the campaign spec names::

    import roundhouse

    @roundhouse.reward
    def exact(completion: str, answer: str, prompt: str, row: dict) -> float:
        return float(completion.strip() == answer.strip())

    $ python -m roundhouse worker my_env.py --task-queue rewards
"""

from __future__ import annotations

from roundhouse.loss import (
    LossBatch,
    LossDatum,
    LossFunction,
    LossOutput,
    TorchLossBatch,
    TorchLossDatum,
    TorchLossFunction,
    loss,
)
from roundhouse.registry import (
    DataPolicyFunction,
    EnvironmentFunction,
    ScoringFunction,
    Unscorable,
    current_sample,
    data_policy,
    environment,
    registry,
    reward,
    scorer,
    unscorable,
)

__version__ = "0.1.0"
__all__ = [
    "DataPolicyFunction",
    "EnvironmentFunction",
    "LossBatch",
    "LossDatum",
    "LossFunction",
    "LossOutput",
    "ScoringFunction",
    "TorchLossBatch",
    "TorchLossDatum",
    "TorchLossFunction",
    "Unscorable",
    "__version__",
    "current_sample",
    "data_policy",
    "environment",
    "loss",
    "registry",
    "reward",
    "scorer",
    "unscorable",
]
