"""The user's functions the Python-worker tests run: each logs its calls (by sample key) for the test to count."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import roundhouse


def _log(kind: str) -> None:
    calls = os.environ.get("ROUNDHOUSE_TEST_CALLS")
    if calls:
        sample = roundhouse.current_sample() or {}
        with open(calls, "a") as out:
            out.write(json.dumps({"kind": kind, "key": sample.get("key"), "pid": os.getpid()}) + "\n")
            out.flush()
            os.fsync(out.fileno())


def _calls_so_far(kind: str) -> int:
    calls = os.environ.get("ROUNDHOUSE_TEST_CALLS")
    if not calls or not Path(calls).exists():
        return 0
    return sum(1 for line in Path(calls).read_text().splitlines() if json.loads(line)["kind"] == kind)


@roundhouse.reward
def digits_reward(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
    """The share of the completion's characters that are digits or spaces, plus 1 for the right answer: it varies
    within a group from the first step (an untrained model's text has some spaces), so GRPO learns from it."""
    time.sleep(float(os.environ.get("ROUNDHOUSE_TEST_REWARD_DELAY", "0")))
    chars = completion or " x"
    score = sum(1 for c in chars if c.isdigit() or c == " ") / len(chars) + (completion.strip() == answer.strip())
    _log("reward")
    return score


@roundhouse.reward
async def flaky_judge(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
    """A judge whose first ROUNDHOUSE_TEST_FAIL_FIRST calls time out (an infrastructure error, never a 0)."""
    if _calls_so_far("judge-failure") < int(os.environ.get("ROUNDHOUSE_TEST_FAIL_FIRST", "0")):
        _log("judge-failure")
        raise TimeoutError("the judge did not answer in time")
    _log("reward")
    return 1.0 + len(completion) % 2


@roundhouse.reward
def broken_judge(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
    _log("judge-failure")
    raise ConnectionError("judge endpoint refused the connection")


@roundhouse.reward
def picky_reward(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> Any:
    """Unscorable when the completion is empty or has an even length; else a length-based reward."""
    _log("reward")
    if len(completion) % 2 == 0:
        return roundhouse.unscorable("even length")
    return (len(completion) % 7) / 7


@roundhouse.reward
def two_args(completion: str, answer: str) -> float:
    return 0.0


@roundhouse.scorer
def has_answer_digit(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> bool:
    _log("scorer")
    return any(c in completion for c in answer if c.isalnum())


@roundhouse.data_policy
def every_other_row(pool: list[dict[str, Any]], results: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Pool rows 1, 3, 5, … — each with the last round's result's match, so the test sees the results arrived."""
    _log("policy")
    chosen = []
    for i, (row, result) in enumerate(zip(pool, results, strict=True)):
        if i % 2 == 0:
            chosen.append({**row, "last_match": None if result is None else bool(result["match"])})
    return chosen
