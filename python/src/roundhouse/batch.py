"""A recorded batch: what `roundhouse.rewards`, `roundhouse.scores` and `roundhouse.episodes` share.

Each item's outcome is recorded in the store at `<records>/<key>.json` with a digest of its inputs, so a retried
attempt, a re-run step or a replayed activity reads it back instead of computing it again. Items are computed
concurrently up to a limit, with a heartbeat saying how many were computed and reused; an item whose computation
raises is kept as a failure (its batch decides what that means) and records nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from roundhouse.registry import _current
from roundhouse.store import join, list_under, read_json, write_json

HEARTBEAT_SECONDS = 2.0

Item = dict[str, Any]
Outcome = TypeVar("Outcome")
T = TypeVar("T")


@dataclass
class RecordedBatch(Generic[Outcome]):
    """How one kind of batch computes, records and reads back an item's outcome.

    `digest(item)`: what the item's inputs are, so a record made from other inputs is never reused. `compute(item)`:
    the outcome and the fields recorded for it (the record is `{"digest", **fields, "context"}`). `reuse(record)`: the
    outcome a record holds."""

    digest: Callable[[Item], str]
    compute: Callable[[Item], Awaitable[tuple[Outcome, dict[str, Any]]]]
    reuse: Callable[[dict[str, Any]], Outcome]


@dataclass
class BatchOutcome(Generic[Outcome]):
    """`outcomes[i]` for `items[i]` (None for an item that failed); `failures` in the order they happened."""

    outcomes: list[Outcome | None]
    computed: int = 0
    reused: int = 0
    failures: list[tuple[Item, BaseException]] = field(default_factory=list)


async def read_items(location: str, missing: str) -> list[Item]:
    """The batch's items (`{"items": [...]}` at `location`); a missing file fails for good, saying `missing`."""
    loaded = await asyncio.to_thread(read_json, location)
    if loaded is None:
        raise ApplicationError(f"{location}: {missing}", type="InvalidInput", non_retryable=True)
    items: list[Item] = loaded["items"]
    return items


async def run_recorded_batch(
    batch: RecordedBatch[Outcome], items: list[Item], records: str, concurrency: int
) -> BatchOutcome[Outcome]:
    result: BatchOutcome[Outcome] = BatchOutcome([None] * len(items))
    limit = asyncio.Semaphore(max(1, concurrency))
    # What earlier attempts recorded, listed once per folder of the keys (one request on S3, not one per item).
    folders = sorted({item["key"].rpartition("/")[0] for item in items})
    listed = await asyncio.gather(*(asyncio.to_thread(list_under, join(records, f) if f else records) for f in folders))
    recorded = {location for locations in listed for location in locations}

    async def one(index: int, item: Item) -> None:
        location = join(records, f"{item['key']}.json")
        digest = batch.digest(item)
        record = await asyncio.to_thread(read_json, location) if location in recorded else None
        if record is not None and record.get("digest") == digest:
            result.outcomes[index] = batch.reuse(record)
            result.reused += 1
            return
        async with limit:
            _current.set({"key": item["key"], **(item.get("context") or {})})  # this task's own context
            try:
                outcome, fields = await batch.compute(item)
            except Exception as err:
                result.failures.append((item, err))
                return
        await asyncio.to_thread(write_json, location, {"digest": digest, **fields, "context": item.get("context")})
        result.outcomes[index] = outcome
        result.computed += 1

    def progress() -> dict[str, int]:
        return {"computed": result.computed, "reused": result.reused, "of": len(items)}

    await heartbeating(asyncio.gather(*(one(i, item) for i, item in enumerate(items))), progress)
    return result


async def heartbeating(work: Awaitable[T], details: Callable[[], Any]) -> T:
    """Awaits the work, heartbeating `details()` every HEARTBEAT_SECONDS meanwhile."""

    async def beat() -> None:
        while True:
            activity.heartbeat(details())
            await asyncio.sleep(HEARTBEAT_SECONDS)

    beating = asyncio.create_task(beat())
    try:
        return await work
    finally:
        beating.cancel()


def where(item: Item) -> str:
    """The item as a failure names it: its context (step, prompt, sample, line), or its key."""
    context = item.get("context") or {}
    parts = [f"{k} {v}" for k, v in context.items() if v is not None]
    return ", ".join(parts) or f"key {item.get('key')}"
