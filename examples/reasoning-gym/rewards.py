"""The user's side of the reasoning-gym example: rewards and a scorer, registered for a Roundhouse Python worker.

    python -m roundhouse worker examples/reasoning-gym/rewards.py --task-queue reasoning-gym

- `rg_verifier`: reasoning-gym's own verifier for the row's dataset (1.0 for the right answer, partial credit for an
  answer inside other text, 0 otherwise), reading the generator's metadata the row carries.
- `math_verify_reward`: Hugging Face's math-verify, which compares answers as numbers and expressions (`1/2`, `0.5`
  and `\\frac{1}{2}` are equal), for any numeric data.
- `rg_correct`: the verifier's full marks, as the evaluation's scorer (a bool: the share right is the accuracy).
"""

from __future__ import annotations

from typing import Any

import reasoning_gym
from math_verify import parse, verify

import roundhouse


@roundhouse.reward
def rg_verifier(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
    score_answer = reasoning_gym.get_score_answer_fn(row["metadata"]["source_dataset"])
    return float(score_answer(completion.strip(), row))


@roundhouse.reward
def math_verify_reward(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
    # The timeouts math-verify sets with signals work only on a main thread; the worker runs sync functions in
    # threads, and an attempt is bounded anyway (the spec's timeoutSeconds).
    gold = parse(answer, parsing_timeout=None)
    predicted = parse(completion, parsing_timeout=None)
    return float(bool(predicted) and verify(gold, predicted, timeout_seconds=None))


@roundhouse.scorer
def rg_correct(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> bool:
    return rg_verifier(completion, answer, prompt, row) == 1.0
