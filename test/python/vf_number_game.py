"""A multi-turn game written with `verifiers`' own classes (its classic API: MultiTurnEnv, Rubric, load_environment).

The model is asked for a number, then asked twice more ("Another number?"): three model turns per episode. Each
reply's share of digits and spaces is its score, and the episode's reward is the mean over its replies. An untrained
model's replies vary, so GRPO learns from the first step, and the reward rises as it learns to answer in digits.
Each episode logs its replies to ROUNDHOUSE_TEST_CALLS (when set) for the tests to count. `number_chat` is the same
game as a plain `@roundhouse.environment` rollout over the OpenAI client.
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


def load_environment(turns: int = 3, **kwargs: Any) -> vf.Environment:
    dataset = Dataset.from_list([{"question": "Say a number.", "answer": "0"}])
    return NumberGame(dataset=dataset, rubric=vf.Rubric(funcs=[digit_share]), max_turns=turns, **kwargs)


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
