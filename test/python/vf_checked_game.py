"""A verifiers environment whose `load_environment` takes only its own parameter, `turns` (1 to 5), as most do: a spec
that gives it a wrong argument is refused when the Python worker loads it to check the spec (before any spend)."""

from __future__ import annotations

import verifiers as vf
from datasets import Dataset


def load_environment(turns: int = 3) -> vf.Environment:
    if not 1 <= turns <= 5:
        raise ValueError(f"turns must be between 1 and 5, not {turns}")
    dataset = Dataset.from_list([{"question": "Say a number.", "answer": "0"}])
    return vf.SingleTurnEnv(dataset=dataset, rubric=vf.Rubric(funcs=[]))
