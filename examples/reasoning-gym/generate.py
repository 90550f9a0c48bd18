"""Writes train.jsonl and eval.jsonl: one-digit sums and differences from reasoning-gym's `basic_arithmetic`.

reasoning-gym generates its problems (no download) and scores answers with its own verifier; each row keeps the
generator's `metadata`, which is what the verifier needs (rewards.py). Run from the repository root:

    .roundhouse/venvs/python/bin/python examples/reasoning-gym/generate.py
"""

from __future__ import annotations

import json
from pathlib import Path

import reasoning_gym

HERE = Path(__file__).parent


def rows(size: int, seed: int) -> list[dict[str, object]]:
    dataset = reasoning_gym.create_dataset(
        "basic_arithmetic",
        min_terms=2,
        max_terms=2,
        min_digits=1,
        max_digits=1,
        operators=("+", "-"),
        size=size,
        seed=seed,
    )
    return [
        {"prompt": entry["question"], "answer": entry["answer"], "metadata": entry["metadata"]} for entry in dataset
    ]


def write(name: str, data: list[dict[str, object]]) -> None:
    (HERE / name).write_text("".join(json.dumps(row) + "\n" for row in data))


if __name__ == "__main__":
    # Item i of a dataset is drawn with seed + i, so two seeds overlap: one draw, split into distinct prompts.
    unique = list({str(row["prompt"]): row for row in rows(400, seed=7)}.values())
    train, held_out = unique[:160], unique[160:192]
    write("train.jsonl", train)
    write("eval.jsonl", held_out)
    print(f"{len(train)} training and {len(held_out)} held-out problems")
