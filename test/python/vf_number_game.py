"""A multi-turn game written with `verifiers`' own classes (its classic API: MultiTurnEnv, Rubric, load_environment).

The model is asked for a number, then asked twice more ("Another number?"): three model turns per episode. Each
reply's share of digits and spaces is its score, and the episode's reward is the mean over its replies. An untrained
model's replies vary, so GRPO learns from the first step, and the reward rises as it learns to answer in digits.
Each episode logs its replies to ROUNDHOUSE_TEST_CALLS (when set) for the tests to count. `number_chat` is the same
game as a plain `@roundhouse.environment` rollout over the OpenAI client. `load_environment(judge_fails=N)` and
`swallowing_chat` are the environments whose infrastructure errors the tests check are never scored.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import verifiers as vf
from datasets import Dataset

import roundhouse


def _text(message: Any) -> str:
    content = message["content"] if isinstance(message, dict) else getattr(message, "content", "")
    return content if isinstance(content, str) else ""


def _role(message: Any) -> str:
    return str(message["role"] if isinstance(message, dict) else getattr(message, "role", ""))


class NumberGame(vf.MultiTurnEnv):
    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> list[dict[str, str]]:
        # ROUNDHOUSE_TEST_ENV_DELAY (seconds) slows each environment turn, for the crash tests to land mid-episode;
        # ROUNDHOUSE_TEST_ENV_DELAY_FILE names a file holding the delay, which a test changes while the worker runs.
        delay = float(os.environ.get("ROUNDHOUSE_TEST_ENV_DELAY") or 0)
        delay_file = os.environ.get("ROUNDHOUSE_TEST_ENV_DELAY_FILE")
        if delay_file:
            with open(delay_file) as f:
                delay = float(f.read().strip() or 0)
        if delay:
            await asyncio.sleep(delay)
        return [{"role": "user", "content": "Another number?"}]


def digit_share(completion: Any, answer: str, **kwargs: Any) -> float:
    replies = [_text(m) for m in completion if _role(m) == "assistant"]
    if not replies:
        return 0.0
    calls = os.environ.get("ROUNDHOUSE_TEST_CALLS")
    if calls:
        with open(calls, "a") as out:
            out.write(json.dumps({"kind": "episode", "replies": replies, "pid": os.getpid()}) + "\n")
    return sum(sum(c.isdigit() or c == " " for c in r or " x") / len(r or " x") for r in replies) / len(replies)


def _log(kind: str, **fields: Any) -> None:
    calls = os.environ.get("ROUNDHOUSE_TEST_CALLS")
    if calls:
        sample = roundhouse.current_sample() or {}
        with open(calls, "a") as out:
            out.write(json.dumps({"kind": kind, "key": sample.get("key"), **fields}) + "\n")


def _logged(kind: str) -> int:
    calls = os.environ.get("ROUNDHOUSE_TEST_CALLS")
    if not calls or not os.path.exists(calls):
        return 0
    with open(calls) as lines:
        return sum(1 for line in lines if json.loads(line)["kind"] == kind)


def load_environment(turns: int = 3, judge_fails: int = 0, **kwargs: Any) -> vf.Environment:
    """`judge_fails`: the rubric is a judge whose first `judge_fails` calls time out (an infrastructure error that
    verifiers' Rubric would score 0.0); it logs each failure and each score to ROUNDHOUSE_TEST_CALLS."""
    dataset = Dataset.from_list([{"question": "Say a number.", "answer": "0"}])

    def judged_digit_share(completion: Any, answer: str, **kwargs: Any) -> float:
        if _logged("judge-failure") < judge_fails:
            _log("judge-failure")
            raise TimeoutError("the judge did not answer in time")
        replies = [_text(m) for m in completion if _role(m) == "assistant"] or [""]
        score = sum(sum(c.isdigit() or c == " " for c in r or " x") / len(r or " x") for r in replies) / len(replies)
        _log("judged", score=score)
        return score

    rubric = vf.Rubric(funcs=[judged_digit_share if judge_fails else digit_share])
    return NumberGame(dataset=dataset, rubric=rubric, max_turns=turns, **kwargs)


@roundhouse.environment
async def number_chat(client: Any, prompt: Any, answer: str, row: dict[str, Any]) -> float:
    """The same game as a plain rollout over the OpenAI client (`kind: python`): two model turns."""
    messages = list(prompt)
    replies: list[str] = []
    for _ in range(2):
        reply = await client.chat.completions.create(model="policy", messages=messages, logprobs=True)
        text = reply.choices[0].message.content or ""
        replies.append(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Another number?"}]
    return sum(sum(c.isdigit() or c == " " for c in r or " x") / len(r or " x") for r in replies) / len(replies)


@roundhouse.environment
async def swallowing_chat(client: Any, prompt: Any, answer: str, row: dict[str, Any]) -> float:
    """An environment that turns a failed model call into a reward of -1 (what a careless environment does): the
    gateway's 5xx must fail the episode whatever it returns. It logs the error text it was given."""
    try:
        reply = await client.chat.completions.create(model="policy", messages=list(prompt))
    except Exception as err:
        _log("swallowed", error=str(err))
        return -1.0
    text = reply.choices[0].message.content or ""
    return sum(c.isdigit() or c == " " for c in text or " x") / len(text or " x")
