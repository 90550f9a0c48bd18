"""The activities the TypeScript workflows call on a Python worker's task queue, by name.

- `roundhouse.describe`: before any spend, whether the named functions exist and can take their role's arguments, and
  whether a verifiers environment loads with its `args`.
- `roundhouse.rewards` / `roundhouse.scores`: a batch of completions (by store location, never in the history)
  scored by a registered reward or scorer. Each result is recorded in the store under the sample's key (campaign,
  round, step, prompt, sample) with a digest of its inputs, so a retried attempt, a re-run step or a replayed
  activity reads it back instead of calling the function again. A function that raises fails the activity (retried
  under the spec's policy), never a 0; `roundhouse.unscorable(reason)` takes a sample out explicitly.
- `roundhouse.next_data`: a data policy picks the next round's rows from the pool and the last round's results.
- `roundhouse.loss`: the user's loss over a step's datums (by store location): its loss, metrics and gradients are
  recorded with a digest of the batch, and the TypeScript side reads the gradients from the record.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import platform
import socket
import traceback
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from roundhouse import __version__
from roundhouse.batch import Item, RecordedBatch, heartbeating, read_items, run_recorded_batch, where
from roundhouse.episodes import (
    VERIFIERS_PREFIX,
    EpisodeRequest,
    EpisodeResult,
    EpisodeTooLong,
    GatewayTransport,
    episode_function,
    verifiers_problem,
)
from roundhouse.loss import CheckedLoss, LossBatch, UnusableLoss, checked, loss_batch
from roundhouse.registry import ROLES, Registered, Registry, Role, Unscorable, registry
from roundhouse.store import read_json, read_text, write_json, write_text

FAILURE_TYPES: dict[Role, str] = {
    "reward": "RewardFailed",
    "scorer": "ScorerFailed",
    "data_policy": "DataPolicyFailed",
    "environment": "EnvironmentFailed",
    "loss": "LossFailed",
}
SECRET_NAME = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL")
# An episode's reward and the ids of its turns.
Played = tuple[float | Unscorable, list[str]]


@dataclass
class FunctionRef:
    role: str
    name: str
    # An environment's keyword arguments (`round.grpo.environment.args`): a verifiers one is loaded with them.
    args: dict[str, Any] | None = None


@dataclass
class DescribeRequest:
    functions: list[FunctionRef]


@dataclass
class DescribedFunction:
    role: str
    name: str
    ok: bool
    problem: str | None = None
    signature: str | None = None
    is_async: bool = False
    # The spec field under the function's block that the problem is in: `name` (the default) or `args`.
    field: str = "name"


@dataclass
class DescribeResult:
    functions: list[DescribedFunction]
    registered: dict[str, list[str]]
    worker: str
    python: str
    roundhouse: str
    sandbox: str


@dataclass
class ScoreRequest:
    """`items`: the location of `{"items": [{key, completion, answer, prompt, row, context}]}`; `records`: where each
    result is kept (`<records>/<key>.json`)."""

    function: str
    items: str
    records: str
    concurrency: int = 8


@dataclass
class ScoreResult:
    """`values[i]` for `items[i]`: the score, or None when the function said the sample is unscorable."""

    values: list[float | None]
    computed: int
    reused: int
    unscorable: int
    unscorable_reasons: list[str] = field(default_factory=list)


@dataclass
class NextDataRequest:
    function: str
    pool: str
    results: str | None
    output: str
    round: int


@dataclass
class NextDataResult:
    rows: int
    reused: bool


@dataclass
class LossRequest:
    """`batch`: the location of `{step, mode, rows, datums, context}`; `record`: where the function's result is kept.
    `mode`: "train" (the record holds the gradients the trainer is sent) or "eval" (the loss and metrics only)."""

    function: str
    batch: str
    record: str
    mode: str = "train"


@dataclass
class LossResult:
    """The loss and metrics; the gradients stay in the record at `record`, out of Temporal's history."""

    record: str
    loss: float
    metrics: dict[str, float]
    reused: bool
    datums: int


def masked(text: str) -> str:
    """The text with the values of secret-named environment variables replaced (errors go into Temporal's history)."""
    for name, value in os.environ.items():
        if len(value) >= 8 and any(part in name.upper() for part in SECRET_NAME):
            text = text.replace(value, "***")
    return text


def _sandbox_isolation() -> str:
    from roundhouse import sandbox  # probes the host once, on the first describe

    return sandbox.isolation()


def _digest(*inputs: Any) -> str:
    """What a record was made from: a record whose digest differs is computed again, never reused."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def _score_digest(name: str, item: Item) -> str:
    return _digest(name, item.get("completion"), item.get("answer"), item.get("prompt"), item.get("row"))


async def _call(function: Registered, *args: Any) -> Any:
    if function.is_async:
        return await cast(Awaitable[Any], function.function(*args))
    return await asyncio.to_thread(function.function, *args)


class _BadReturn(Exception):
    """The function returned something that is not a score: the same call would again, so it is not retried."""


def _score_of(role: Role, name: str, value: Any) -> float | Unscorable:
    if isinstance(value, Unscorable):
        return value
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    shown = "None" if value is None else f"{type(value).__name__} {value!r}"[:200]
    raise _BadReturn(
        f"{role} {name!r} returned {shown}; return a finite number"
        f"{' or bool' if role == 'scorer' else ''}, or roundhouse.unscorable(reason) for a sample it cannot score"
    )


def _error_text(err: BaseException) -> str:
    """The exception as one line for a failure's message, with secrets masked."""
    return masked("".join(traceback.format_exception_only(type(err), err)).strip())


def _more(failed: int, of: int) -> str:
    return f" (and {failed - 1} more of {of})" if failed > 1 else ""


class Activities:
    """The activities over one registry (the process's, unless a test passes its own)."""

    def __init__(self, functions: Registry = registry) -> None:
        self.functions = functions

    def all(self) -> list[Any]:
        return [self.describe, self.rewards, self.scores, self.next_data, self.episodes, self.loss]

    @activity.defn(name="roundhouse.describe")
    async def describe(self, request: DescribeRequest) -> DescribeResult:
        described = []
        for ref in request.functions:
            role = ref.role
            if role == "environment" and ref.name.startswith(VERIFIERS_PREFIX):
                module = ref.name.removeprefix(VERIFIERS_PREFIX)
                problem = await asyncio.to_thread(verifiers_problem, module)
                field = "name"
                if problem is None:
                    # On the event loop's thread, as the episodes load it: verifiers sets signal handlers as it loads.
                    problem = self._load_problem(ref)
                    field = "args"
                described.append(
                    DescribedFunction(
                        role, ref.name, ok=problem is None, problem=problem, signature=ref.name, field=field
                    )
                )
                continue
            found = self.functions.get(role, ref.name) if role in ROLES else None
            if found is None:
                known = self.functions.names(role) if role in ROLES else []
                missing = f"no {role} named {ref.name!r} is registered (registered: {', '.join(known) or 'none'})"
                described.append(DescribedFunction(role, ref.name, ok=False, problem=missing))
                continue
            unfit = found.problem()
            described.append(
                DescribedFunction(
                    role,
                    ref.name,
                    ok=unfit is None,
                    problem=unfit,
                    signature=found.signature(),
                    is_async=found.is_async,
                )
            )
        return DescribeResult(
            functions=described,
            registered={role: self.functions.names(role) for role in ROLES},
            worker=f"{socket.gethostname()}:{os.getpid()}",
            python=platform.python_version(),
            roundhouse=__version__,
            sandbox=await asyncio.to_thread(_sandbox_isolation),
        )

    def _load_problem(self, ref: FunctionRef) -> str | None:
        """Why the environment does not load with the spec's args, or None: loaded as its episodes will load it (and
        kept loaded for them), so wrong args are a described problem before any spend, not a failure at step 1."""
        args = ref.args or {}
        try:
            episode_function(self.functions, ref.name, args, model="")
        except Exception as err:
            error = _error_text(err)
            return f"load_environment(**{json.dumps(args, default=str)[:300]}) failed: {error}"
        return None

    @activity.defn(name="roundhouse.rewards")
    async def rewards(self, request: ScoreRequest) -> ScoreResult:
        return await self._score("reward", request)

    @activity.defn(name="roundhouse.scores")
    async def scores(self, request: ScoreRequest) -> ScoreResult:
        return await self._score("scorer", request)

    def _function(self, role: Role, name: str) -> Registered:
        found = self.functions.get(role, name)
        if found is None:
            raise ApplicationError(
                f"no {role} named {name!r} is registered on this worker "
                f"(registered: {', '.join(self.functions.names(role)) or 'none'})",
                type="InvalidInput",
                non_retryable=True,
            )
        return found

    async def _score(self, role: Role, request: ScoreRequest) -> ScoreResult:
        function = self._function(role, request.function)
        items = await read_items(request.items, "the batch to score is missing")

        async def compute(item: Item) -> tuple[float | Unscorable, dict[str, Any]]:
            answer = await _call(function, item["completion"], item["answer"], item["prompt"], item.get("row") or {})
            score = _score_of(role, function.name, answer)
            return score, {
                "function": function.name,
                "value": None if isinstance(score, Unscorable) else score,
                "unscorable": score.reason if isinstance(score, Unscorable) else None,
            }

        def reuse(record: dict[str, Any]) -> float | Unscorable:
            value: float | None = record.get("value")
            return Unscorable(record.get("unscorable") or "") if value is None else value

        batch = RecordedBatch(lambda item: _score_digest(function.name, item), compute, reuse)
        done = await run_recorded_batch(batch, items, request.records, request.concurrency)
        if done.failures:
            item, err = done.failures[0]
            error = _error_text(err)
            failed = len(done.failures)
            details = {
                "function": function.name,
                "row": item.get("row"),
                "context": item.get("context"),
                "error": error,
                "failed": failed,
                "of": len(items),
            }
            raise ApplicationError(
                f"{role} {function.name!r} failed on {where(item)}: {error}{_more(failed, len(items))}",
                details,
                type=FAILURE_TYPES[role],
                non_retryable=isinstance(err, _BadReturn),
            )
        reasons = [v.reason for v in done.outcomes if isinstance(v, Unscorable)]
        return ScoreResult(
            values=[None if isinstance(v, Unscorable) else v for v in done.outcomes],
            computed=done.computed,
            reused=done.reused,
            unscorable=len(reasons),
            unscorable_reasons=reasons[:20],
        )

    @activity.defn(name="roundhouse.next_data")
    async def next_data(self, request: NextDataRequest) -> NextDataResult:
        function = self._function("data_policy", request.function)
        existing = await asyncio.to_thread(read_text, request.output)
        if existing is not None:  # chosen by an earlier attempt: the same rows, whatever the policy would pick now
            return NextDataResult(rows=sum(1 for line in existing.splitlines() if line.strip()), reused=True)
        text = await asyncio.to_thread(read_text, request.pool)
        if text is None:
            raise ApplicationError(f"{request.pool}: the pool is missing", type="InvalidInput", non_retryable=True)
        lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
        pool = [json.loads(line) for _, line in lines]
        scored = (await asyncio.to_thread(read_json, request.results)) if request.results else None
        by_line = {r["line"]: r for r in scored or []}
        results = [by_line.get(n) for n, _ in lines]
        try:
            chosen = await _call(function, pool, results)
        except Exception as err:
            error = _error_text(err)
            raise ApplicationError(
                f"data policy {function.name!r} failed choosing round {request.round}'s rows: {error}",
                {"function": function.name, "error": error},
                type=FAILURE_TYPES["data_policy"],
            ) from None
        if not isinstance(chosen, list) or not all(isinstance(row, dict) for row in chosen):
            raise ApplicationError(
                f"data policy {function.name!r} returned {type(chosen).__name__}; return a list of rows (dicts)",
                type=FAILURE_TYPES["data_policy"],
                non_retryable=True,
            )
        body = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in chosen)
        await asyncio.to_thread(write_text, request.output, body)
        return NextDataResult(rows=len(chosen), reused=False)

    @activity.defn(name="roundhouse.episodes")
    async def episodes(self, request: EpisodeRequest) -> EpisodeResult:
        """A step's episodes: each runs the environment over its own client to the round's gateway; its reward and the
        ids of its turns are recorded under its key, so a retried attempt re-runs only the unfinished episodes (and
        those replay their recorded turns from the gateway)."""
        try:
            run = episode_function(self.functions, request.environment, request.args, request.model)
        except LookupError as err:
            raise ApplicationError(str(err), type="InvalidInput", non_retryable=True) from None
        except Exception as err:
            raise ApplicationError(
                f"environment {request.environment!r} did not load: {_error_text(err)}", type="EnvironmentFailed"
            ) from None
        items = await read_items(request.items, "the episodes are missing")
        from openai import AsyncOpenAI

        def digest(item: Item) -> str:
            return _digest(request.environment, request.args, item.get("prompt"), item.get("answer"), item.get("row"))

        async def compute(item: Item) -> tuple[Played, dict[str, Any]]:
            transport = GatewayTransport(request.gateway, item["key"])
            http = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(600.0))
            client = AsyncOpenAI(
                base_url="http://roundhouse-gateway/v1", api_key="episode", http_client=http, max_retries=0
            )
            try:
                reward = _score_of("environment", request.environment, await run(client, item))
            except Exception:
                if transport.failure is not None:  # the broken turn, not what the environment made of it
                    raise transport.failure from None
                raise
            finally:
                await http.aclose()
            if transport.failure is not None:  # a broken turn the environment scored anyway: never its reward
                raise transport.failure
            return (reward, transport.turns), {
                "environment": request.environment,
                "reward": None if isinstance(reward, Unscorable) else reward,
                "unscorable": reward.reason if isinstance(reward, Unscorable) else None,
                "turns": transport.turns,
            }

        def reuse(record: dict[str, Any]) -> Played:
            value: float | None = record.get("reward")
            reward = Unscorable(record.get("unscorable") or "") if value is None else value
            return reward, list(record.get("turns") or [])

        batch = RecordedBatch(digest, compute, reuse)
        done = await run_recorded_batch(batch, items, request.records, request.concurrency)
        if done.failures:
            # One that no retry can mend is the one reported: it decides that the step fails for good.
            final = _BadReturn | EpisodeTooLong
            item, failure = next((f for f in done.failures if isinstance(f[1], final)), done.failures[0])
            error = _error_text(failure)
            raise ApplicationError(
                f"environment {request.environment!r} failed on {where(item)}: {error}"
                f"{_more(len(done.failures), len(items))}",
                {"environment": request.environment, "context": item.get("context"), "error": error},
                type="EnvironmentFailed",
                non_retryable=isinstance(failure, final),
            )
        played = [p for p in done.outcomes if p is not None]
        return EpisodeResult(
            rewards=[None if isinstance(reward, Unscorable) else reward for reward, _ in played],
            turns=[turns for _, turns in played],
            computed=done.computed,
            reused=done.reused,
            unscorable=sum(1 for reward, _ in played if isinstance(reward, Unscorable)),
        )

    @activity.defn(name="roundhouse.loss")
    async def loss(self, request: LossRequest) -> LossResult:
        """A step's loss, exactly once: a record whose digest matches the batch is returned without calling the
        function; otherwise the function runs (heartbeating), its result is checked and recorded, then returned."""
        function = self._function("loss", request.function)
        document = await asyncio.to_thread(read_json, request.batch)
        if document is None:
            raise ApplicationError(
                f"{request.batch}: the loss's batch is missing", type="InvalidInput", non_retryable=True
            )
        try:
            batch = loss_batch(document, request.mode)
        except (KeyError, TypeError, ValueError) as err:
            raise ApplicationError(
                f"{request.batch}: not a loss batch: {err!r}", type="InvalidInput", non_retryable=True
            ) from None
        digest = _digest(function.name, request.mode, document["rows"], document["datums"])
        record = await asyncio.to_thread(read_json, request.record)
        if record is not None and record.get("digest") == digest:
            return LossResult(request.record, record["loss"], record["metrics"], reused=True, datums=len(batch))
        context = document.get("context") or {}
        step = context.get("step", None if batch.step is None else batch.step + 1)
        try:
            returned = await heartbeating(_call(function, batch), lambda: {"function": function.name, "step": step})
            result = checked(returned, batch)
        except Exception as err:
            raise _loss_failed(function.name, step, err) from None
        await asyncio.to_thread(write_json, request.record, _loss_record(digest, function.name, batch, result))
        return LossResult(request.record, result.loss, result.metrics, reused=False, datums=len(batch))


def _loss_record(digest: str, function: str, batch: LossBatch, result: CheckedLoss) -> dict[str, Any]:
    record: dict[str, Any] = {
        "digest": digest,
        "function": function,
        "mode": batch.mode,
        "loss": result.loss,
        "metrics": result.metrics,
    }
    if result.gradients is not None:
        record["gradients"] = [gradient.tolist() for gradient in result.gradients]
    return record


def _loss_failed(function: str, step: int | None, err: Exception) -> ApplicationError:
    """A loss that returned what the trainer cannot use fails for good (it would again); one that raised is retried."""
    at = f"at step {step}" if step is not None else "in an evaluation"
    unusable = isinstance(err, UnusableLoss)
    error = masked(str(err)) if unusable else _error_text(err)
    said = f"returned an unusable result {at}" if unusable else f"failed {at}"
    return ApplicationError(
        f"loss {function!r} {said}: {error}",
        {"function": function, "step": step, "error": error},
        type=FAILURE_TYPES["loss"],
        non_retryable=unusable,
    )
