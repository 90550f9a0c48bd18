"""The built-in `numeric` reward (activities/scoring.ts, finalNumber) written in Python, for the python-hop benchmark:
both variants of its round do the same scoring, so what it measures is the hop to the Python worker alone."""

from __future__ import annotations

import re
from typing import Any

import roundhouse

_THOUSANDS = re.compile(r"(\d),(?=\d{3}\b)", re.ASCII)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?", re.ASCII)


def _final_number(text: str) -> float | None:
    """The final number of a GSM8K-style text: after the last `####` if there is one, else the last number in it."""
    marked = text.rfind("####")
    tail = text[marked + 4 :] if marked >= 0 else text
    numbers = _NUMBER.findall(_THOUSANDS.sub(r"\1", tail))
    if not numbers:
        return None
    return float(numbers[0] if marked >= 0 else numbers[-1])


@roundhouse.reward
def numeric(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
    got = _final_number(completion)
    want = _final_number(answer)
    return 1.0 if got is not None and want is not None and abs(got - want) <= 1e-6 else 0.0
