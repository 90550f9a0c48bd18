"""The user's functions, registered by decorator, and what the workflows ask about them before any spend."""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload

if TYPE_CHECKING:
    from openai import AsyncOpenAI

Role = Literal["reward", "scorer", "data_policy", "environment", "loss"]
ROLES: tuple[Role, ...] = ("reward", "scorer", "data_policy", "environment", "loss")

# The positional arguments each role is called with, in order.
PARAMETERS: dict[Role, tuple[str, ...]] = {
    "reward": ("completion", "answer", "prompt", "row"),
    "scorer": ("completion", "answer", "prompt", "row"),
    "data_policy": ("pool", "results"),
    "environment": ("client", "prompt", "answer", "row"),
    "loss": ("batch",),
}
RETURNS: dict[Role, str] = {
    "reward": "float (or roundhouse.unscorable(reason))",
    "scorer": "bool | float (or roundhouse.unscorable(reason))",
    "data_policy": "list of rows (dicts with prompt and answer, or messages)",
    "environment": "the episode's reward: float (or roundhouse.unscorable(reason))",
    "loss": "roundhouse.LossOutput (loss, gradients per datum, metrics) or a (loss, gradients[, metrics]) tuple",
}
# The attribute a registered callable names a Requirement by (roundhouse.loss.torch's adapter: PyTorch).
REQUIRES = "__roundhouse_requires__"


@dataclass(frozen=True)
class Requirement:
    """A module a registered function needs that the worker may lack: without it, `problem` is the function's problem,
    so the workflow refuses it before any spend rather than failing at its first call."""

    module: str
    problem: str


@dataclass(frozen=True)
class Unscorable:
    """What a reward or scorer returns for a sample it cannot score: the sample leaves its group, and is counted."""

    reason: str = ""


def unscorable(reason: str = "") -> Unscorable:
    """Returned by a reward or scorer: this sample cannot be scored (never the same as a reward of 0)."""
    return Unscorable(reason)


Row = dict[str, Any]
Score = float | Unscorable
"""What a reward, scorer or environment returns: a number (a bool is one), or an Unscorable."""


class ScoringFunction(Protocol):
    """A reward or a scorer: `(completion, answer, prompt, row)` to a score, sync or async."""

    def __call__(self, completion: str, answer: str, prompt: str, row: Row, /) -> Score | Awaitable[Score]: ...


class DataPolicyFunction(Protocol):
    """A data policy: the pool's rows and the last round's result per row (None where it had none) to the next
    round's rows, sync or async."""

    def __call__(self, pool: list[Row], results: list[Row | None], /) -> list[Row] | Awaitable[list[Row]]: ...


class EnvironmentFunction(Protocol):
    """An environment: plays one episode over the round's OpenAI client, from the row's chat, to its reward."""

    def __call__(self, client: AsyncOpenAI, prompt: list[Row], answer: str, row: Row, /) -> Awaitable[Score]: ...


S = TypeVar("S", bound=ScoringFunction)
D = TypeVar("D", bound=DataPolicyFunction)
E = TypeVar("E", bound=EnvironmentFunction)
F = TypeVar("F", bound=Callable[..., object])


class RegistersScoring(Protocol):
    """`@roundhouse.reward` / `@roundhouse.scorer`, bare or with `name=`: registers the function, returns it as is."""

    @overload
    def __call__(self, function: S, /) -> S: ...
    @overload
    def __call__(self, *, name: str | None = None) -> Callable[[S], S]: ...


class RegistersDataPolicy(Protocol):
    """`@roundhouse.data_policy`, bare or with `name=`."""

    @overload
    def __call__(self, function: D, /) -> D: ...
    @overload
    def __call__(self, *, name: str | None = None) -> Callable[[D], D]: ...


class RegistersEnvironment(Protocol):
    """`@roundhouse.environment`, bare or with `name=`."""

    @overload
    def __call__(self, function: E, /) -> E: ...
    @overload
    def __call__(self, *, name: str | None = None) -> Callable[[E], E]: ...


@dataclass(frozen=True)
class Registered:
    role: Role
    name: str
    function: Callable[..., Any]

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.function)

    def signature(self) -> str:
        try:
            return f"{self.name}{inspect.signature(self.function, eval_str=True)}"
        except Exception:  # annotations that do not evaluate here: shown as written
            try:
                return f"{self.name}{inspect.signature(self.function)}"
            except (TypeError, ValueError):
                return self.name

    def problem(self) -> str | None:
        """Why the workflow could not call this function with its role's arguments, or None when it can."""
        requires = getattr(self.function, REQUIRES, None)
        if isinstance(requires, Requirement) and importlib.util.find_spec(requires.module) is None:
            return requires.problem
        if self.role == "environment" and not self.is_async:
            return f"{self.signature()} must be async def: it drives the episode over an openai.AsyncOpenAI client"
        try:
            signature = inspect.signature(self.function)
        except (TypeError, ValueError):
            return None  # a builtin or C function: found out at the first call
        try:
            signature.bind(*PARAMETERS[self.role])
        except TypeError as err:
            wanted = ", ".join(PARAMETERS[self.role])
            return f"{self.signature()} cannot take ({wanted}): {err}"
        return None


class Registry:
    """Functions by role and name. One per worker process; the decorators fill the default one."""

    def __init__(self) -> None:
        self._functions: dict[tuple[Role, str], Registered] = {}

    def add(self, role: Role, function: Callable[..., Any], name: str | None = None) -> Registered:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r} (expected one of {', '.join(ROLES)})")
        if not callable(function):
            raise TypeError(f"a {role} must be callable, got {type(function).__name__}")
        key = (role, name or function.__name__)
        existing = self._functions.get(key)
        if existing is not None and existing.function is not function:
            raise ValueError(f"a {role} named {key[1]!r} is registered twice")
        registered = Registered(role, key[1], function)
        self._functions[key] = registered
        return registered

    def get(self, role: Role, name: str) -> Registered | None:
        return self._functions.get((role, name))

    def names(self, role: Role) -> list[str]:
        return sorted(name for (r, name) in self._functions if r == role)

    def clear(self) -> None:
        self._functions.clear()


registry = Registry()

_current: ContextVar[dict[str, Any] | None] = ContextVar("roundhouse_current_sample", default=None)


def current_sample() -> dict[str, Any] | None:
    """Inside a reward or scorer: which sample it scores (`key`, and `step`, `prompt`, `sample`, `line` when known)."""
    return _current.get()


class _Decorator:
    """Registers a function under a role in the process's registry, by its own name or `name=`."""

    def __init__(self, role: Role) -> None:
        self.role = role
        self.__name__ = role
        self.__doc__ = f"Registers a {role}: called with ({', '.join(PARAMETERS[role])}), returns {RETURNS[role]}."

    @overload
    def __call__(self, function: F, /) -> F: ...
    @overload
    def __call__(self, function: None = None, /, *, name: str | None = None) -> Callable[[F], F]: ...
    def __call__(self, function: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
        def add(f: F) -> F:
            registry.add(self.role, f, name)
            return f

        return add(function) if function is not None else add


reward: RegistersScoring = _Decorator("reward")
scorer: RegistersScoring = _Decorator("scorer")
data_policy: RegistersDataPolicy = _Decorator("data_policy")
environment: RegistersEnvironment = _Decorator("environment")
