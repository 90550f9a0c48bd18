"""Multi-turn episodes: the user's environment drives each episode over an OpenAI client whose every request goes to
the round's sampler gateway (served by the TypeScript worker that runs the round).

The gateway records each completion under the episode before answering, and answers a request it has recorded (same
turn, same prompt tokens) from its record, so an episode re-run after this worker dies replays its finished turns
without sampling them again. The client finds the gateway through a small file in the store that the round rewrites
whenever its TypeScript worker changes: a connection refused, or a token the gateway no longer knows, makes it read
the file again and retry, so an episode outlives either worker dying.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import importlib.util
import inspect
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from roundhouse.registry import Registry
from roundhouse.store import read_json

VERIFIERS_PREFIX = "verifiers:"
# A round whose TypeScript worker died comes back on another within this long, or the episode fails (and is retried).
GATEWAY_WAIT_SECONDS = 300.0
# A token the gateway does not know, an episode it does not know (its worker changed) or one an abandoned attempt
# ended: the round's next attempt writes the gateway file anew.
RETRYABLE_REFUSALS = {"invalid_token", "unknown_episode", "episode_ended"}


class GatewayUnavailable(Exception):
    """The round's gateway did not come back within GATEWAY_WAIT_SECONDS: an infrastructure error, never a reward."""


class GatewayFailed(Exception):
    """The gateway answered a turn with a 5xx (the round's sampler failed under it): whatever the environment made of
    that broken turn, the episode is an infrastructure failure (retried), never a reward."""


class EpisodeTooLong(Exception):
    """A turn's prompt and max_tokens do not fit the round's training.maxSeqLen (the gateway refused it as
    `context_length_exceeded`): the episode could not be trained as played, so it fails by name; a retry would play
    it the same way."""


@dataclass
class EpisodeRequest:
    """`items`: the location of `{"items": [{key, prompt, answer, row, context}]}`; `gateway`: where each episode's URL
    and token are; `records`: where each episode's result is kept (`<records>/<key>.json`)."""

    environment: str
    items: str
    records: str
    gateway: str
    model: str
    args: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 8


@dataclass
class EpisodeResult:
    rewards: list[float | None]
    turns: list[list[str]]
    computed: int
    reused: int
    unscorable: int


class GatewayTransport(httpx.AsyncBaseTransport):
    """Sends the episode's requests to its gateway URL with its token, read from the gateway file; on a refused
    connection or a token the gateway does not know (its worker changed) reads the file again and retries. Collects
    the ids of the turns the gateway answered, in order: what the round trains on."""

    def __init__(self, gateway_file: str, key: str, wait_seconds: float = GATEWAY_WAIT_SECONDS) -> None:
        self.gateway_file = gateway_file
        self.key = key
        self.wait_seconds = wait_seconds
        self.turns: list[str] = []
        # The first answer that makes the episode unusable whatever the environment did with it (see `failure`).
        self.failure: GatewayFailed | EpisodeTooLong | None = None
        self._inner = httpx.AsyncHTTPTransport()
        self._access: tuple[str, str] | None = None

    async def _load(self) -> tuple[str, str] | None:
        loaded = await asyncio.to_thread(read_json, self.gateway_file)
        entry = (loaded or {}).get("episodes", {}).get(self.key)
        return (entry["url"].rstrip("/"), entry["token"]) if entry else None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        suffix = request.url.raw_path.decode().split("/v1", 1)[-1]
        deadline = time.monotonic() + self.wait_seconds
        stale: tuple[str, str] | None = None
        while True:
            if self._access is None or self._access == stale:
                access = await self._load()
                if access is None or access == stale:
                    if time.monotonic() > deadline:
                        raise GatewayUnavailable(
                            f"episode {self.key}: the round's sampler gateway did not come back "
                            f"in {self.wait_seconds} s"
                        )
                    await asyncio.sleep(0.5)
                    continue
                self._access = access
            url, token = self._access
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("authorization", "host")}
            headers["authorization"] = f"Bearer {token}"
            forwarded = httpx.Request(request.method, url + suffix, headers=headers, content=body)
            try:
                response = await self._inner.handle_async_request(forwarded)
                content = await response.aread()
            except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
                stale = self._access  # the worker that served it is gone: wait for the file to name another
                continue
            if response.status_code in (401, 404) and _error_code(content) in RETRYABLE_REFUSALS:
                stale = self._access
                continue
            self._note(response.status_code, content)
            if response.status_code == 200:
                answer_id = json.loads(content).get("id")
                if isinstance(answer_id, str):
                    self.turns.append(answer_id)
            return httpx.Response(
                response.status_code,
                headers=[(k, v) for k, v in response.headers.items() if k.lower() != "content-encoding"],
                content=content,
            )

    def _note(self, status: int, content: bytes) -> None:
        """Keeps the first answer the episode cannot be scored after: an environment (or verifiers) may catch the
        client's error and go on to a reward, which must not count."""
        if self.failure is not None:
            return
        code, message = _error_of(content)
        if status >= 500:
            self.failure = GatewayFailed(f"turn {len(self.turns) + 1}: the gateway answered {status} {code}: {message}")
        elif status == 400 and code == "context_length_exceeded":
            self.failure = EpisodeTooLong(f"turn {len(self.turns) + 1}: {message}")

    async def aclose(self) -> None:
        await self._inner.aclose()


def _error_of(content: bytes) -> tuple[str | None, str]:
    """An OpenAI-style error body's code and message."""
    try:
        error = json.loads(content).get("error") or {}
    except (ValueError, AttributeError):
        return None, content[:200].decode(errors="replace")
    if not isinstance(error, dict):
        return None, str(error)[:200]
    code = error.get("code")
    return (code if isinstance(code, str) else None), str(error.get("message") or "")


def _error_code(content: bytes) -> str | None:
    return _error_of(content)[0]


Episode = Callable[[Any, dict[str, Any]], Awaitable[Any]]
"""Runs one episode over an `openai.AsyncOpenAI` client and returns its reward (or an Unscorable)."""


class EpisodeError(Exception):
    """The environment reported an error inside the episode (a failed tool, a model call it could not make): an
    infrastructure error, retried, never a reward."""


_loaded: dict[str, Any] = {}


def verifiers_problem(module: str) -> str | None:
    """Why `verifiers:<module>` cannot run here, or None."""
    if importlib.util.find_spec("verifiers") is None:
        return "the verifiers package is not installed on this worker (pip install 'roundhouse[environments]')"
    name = module.replace("-", "_").split("/")[-1]
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError) as err:
        return f"module {name!r} does not import: {err}"
    if found is None:
        return f"no module named {name!r} is importable on this worker (install the environment's package)"
    try:
        loaded = importlib.import_module(name)
    except Exception as err:
        return f"module {name!r} does not import: {type(err).__name__}: {err}"
    if not callable(getattr(loaded, "load_environment", None)):
        return f"module {name!r} has no load_environment()"
    return None


def episode_function(registry: Registry, environment: str, args: dict[str, Any], model: str) -> Episode:
    """The episode runner for `verifiers:<module>` (a verifiers environment), or a registered environment."""
    if environment.startswith(VERIFIERS_PREFIX):
        return _verifiers_episode(environment.removeprefix(VERIFIERS_PREFIX), args, model)
    found = registry.get("environment", environment)
    if found is None:
        raise LookupError(
            f"no environment named {environment!r} is registered on this worker "
            f"(registered: {', '.join(registry.names('environment')) or 'none'})"
        )
    function = found.function

    async def run(client: Any, item: dict[str, Any]) -> Any:
        return await function(client, item["prompt"], item["answer"], item.get("row") or {})

    return run


def _verifiers_episode(module: str, args: dict[str, Any], model: str) -> Episode:
    import verifiers as vf  # type: ignore[import-not-found,unused-ignore]
    from verifiers.clients import OpenAIChatCompletionsClient  # type: ignore[import-not-found,unused-ignore]

    cache_key = json.dumps([module, args], sort_keys=True, default=str)
    env = _loaded.get(cache_key)
    if env is None:
        env = vf.load_environment(module, **args)
        _guard_rubric(env.rubric)
        _loaded[cache_key] = env

    async def run(client: Any, item: dict[str, Any]) -> Any:
        context = item.get("context") or {}
        rollout_input = {
            "prompt": item["prompt"],
            "answer": item["answer"],
            "example_id": int(context.get("line", 0)),
            "info": {"env_id": module},
        }
        raised: list[str] = []
        _rubric_errors.set(raised)  # this episode's task's own list: the rubric is shared by concurrent episodes
        output = await env.run_rollout(rollout_input, OpenAIChatCompletionsClient(client), model, {})
        if raised:
            raise EpisodeError(
                f"the rubric's {raised[0]}{f' (and {len(raised) - 1} more)' if len(raised) > 1 else ''}; "
                "verifiers would have scored it 0.0"
            )
        error = output.get("error")
        if error and not _model_outcome(vf, error):
            raise EpisodeError(f"the verifiers rollout ended with an error: {error}")
        return output.get("reward")

    return run


# The errors that end an episode by the model's own doing (an empty or unparseable reply): the episode's outcome,
# scored by the rubric like any other. Every other error (a provider or sandbox failure) is infrastructure: retried.
_MODEL_OUTCOMES = ("InvalidModelResponseError", "ToolParseError")


def _model_outcome(vf: Any, error: Any) -> bool:
    """Whether a verifiers rollout's error is the model's own outcome rather than infrastructure."""
    name = error.get("error") if isinstance(error, dict) else type(error).__name__
    found = getattr(vf, str(name), None)
    outcomes = tuple(c for c in (getattr(vf, n, None) for n in _MODEL_OUTCOMES) if isinstance(c, type))
    return isinstance(found, type) and issubclass(found, outcomes)


# The rubric failures of the episode running in this task; verifiers' Rubric catches a reward function's exception and
# scores it 0.0 (Rubric._call_individual_reward_func / _call_group_reward_func), so the failure is noted before it does.
_rubric_errors: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("rubric_errors", default=None)


def _note_rubric_error(func: Any, what: str) -> None:
    raised = _rubric_errors.get()
    if raised is not None:
        raised.append(f"reward function {getattr(func, '__name__', repr(func))!r} {what}")


def _guarded(func: Any) -> Any:
    """`func` as the rubric calls it, noting an exception (or a None, which the rubric's float() turns into an
    exception) before the rubric turns it into a 0.0. Its name and signature stay the function's: the rubric picks
    the arguments it passes by them."""

    async def awaited(result: Awaitable[Any]) -> Any:
        try:
            value = await result
        except Exception as err:
            _note_rubric_error(func, f"raised {type(err).__name__}: {err}")
            raise
        if value is None:
            _note_rubric_error(func, "returned None")
        return value

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            result = func(*args, **kwargs)
        except Exception as err:
            _note_rubric_error(func, f"raised {type(err).__name__}: {err}")
            raise
        if inspect.isawaitable(result):
            return awaited(result)
        if result is None:
            _note_rubric_error(func, "returned None")
        return result

    return guarded


def _guard_rubric(rubric: Any) -> None:
    """Guards every reward function of a rubric, and of the rubrics a RubricGroup holds, once."""
    if rubric is None or getattr(rubric, "_roundhouse_guarded", False):
        return
    funcs = getattr(rubric, "funcs", None)
    if isinstance(funcs, list):
        funcs[:] = [_guarded(f) for f in funcs]
    for inner in getattr(rubric, "rubrics", None) or []:
        _guard_rubric(inner)
    rubric._roundhouse_guarded = True
