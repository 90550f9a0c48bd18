"""Loss functions the custom-loss tests run: a cross-entropy that logs each call's start and end (by step, mode and
process), and ones that fail in the ways a user's loss can (raises, NaN, gradients of the wrong shape)."""

from __future__ import annotations

import json
import os
import time

import numpy as np

import roundhouse


def _log(event: str, batch: roundhouse.LossBatch) -> None:
    calls = os.environ.get("ROUNDHOUSE_TEST_CALLS")
    if calls:
        with open(calls, "a") as out:
            out.write(json.dumps({"kind": event, "step": batch.step, "mode": batch.mode, "pid": os.getpid()}) + "\n")
            out.flush()
            os.fsync(out.fileno())


def _cross_entropy(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    tokens = sum(d.tokens for d in batch)
    loss = -sum(d.completion_logprob() for d in batch) / tokens
    return roundhouse.LossOutput(
        loss=float(loss), gradients=[-d.weights / tokens for d in batch], metrics={"tokens": float(tokens)}
    )


@roundhouse.loss
def logged_cross_entropy(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    """Cross-entropy per answer token; at train step ROUNDHOUSE_TEST_SLOW_STEP (0-based) it takes
    ROUNDHOUSE_TEST_SLOW_SECONDS, so a test can kill the worker inside the call."""
    _log("start", batch)
    if batch.step is not None and batch.step == int(os.environ.get("ROUNDHOUSE_TEST_SLOW_STEP", "-1")):
        time.sleep(float(os.environ.get("ROUNDHOUSE_TEST_SLOW_SECONDS", "0")))
    out = _cross_entropy(batch)
    _log("done", batch)
    return out


@roundhouse.loss
def raising_at_step_two(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    if batch.step == 1:
        _log("raised", batch)
        raise ValueError("the margin table is missing")
    return _cross_entropy(batch)


@roundhouse.loss
def nan_at_step_two(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    out = _cross_entropy(batch)
    if batch.step == 1:
        _log("nan", batch)
        out.gradients[0] = np.full_like(out.gradients[0], np.nan)
    return out


@roundhouse.loss
def short_gradients(batch: roundhouse.LossBatch) -> tuple[float, list[np.ndarray]]:
    out = _cross_entropy(batch)
    return out.loss, [g[:-1] for g in out.gradients]


@roundhouse.loss
def two_arguments(batch: roundhouse.LossBatch, extra: int) -> float:
    return 0.0
