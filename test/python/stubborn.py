"""A reward that ignores cancellation (some libraries' loops do): a worker's stop cannot finish while it runs."""

from __future__ import annotations

import asyncio
from typing import Any

import roundhouse


@roundhouse.reward
async def stubborn_reward(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue
