"""The user's own loss: `@roundhouse.loss` turns the trainer's logprobs of a batch's datums into a loss and its
gradient with respect to each of those logprobs, which the TypeScript side sends to the trainer.

A datum is one target sequence of a data row (its `answer`, its `chosen` or `rejected` completion, or one of its
`completions`): the trainer's logprob of each of its tokens, with a weight per token (1 on the completion's tokens, 0
on the prompt's). The function returns the loss, one gradient per datum (d loss / d logprob, one entry per token, in
the batch's order) and metrics::

    @roundhouse.loss
    def dpo(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
        ...

`@roundhouse.loss.torch` takes a loss computed with PyTorch instead and leaves the gradients to autograd. Nothing here
imports temporalio (the activity is `roundhouse.activities`'s) or torch (imported when a torch loss first runs).
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeGuard, TypeVar, overload

import numpy as np
import numpy.typing as npt

from roundhouse.registry import Requirement, Row, _Decorator, registry

if TYPE_CHECKING:
    from torch import Tensor

Vector = npt.NDArray[np.float64]
Mode = Literal["train", "eval"]
MODES: tuple[Mode, ...] = ("train", "eval")
Gradients = Sequence[npt.ArrayLike] | npt.NDArray[np.floating[Any]]
"""One gradient per datum: a list of arrays (or a 2-D array when the datums are as long as one another)."""

TORCH = Requirement("torch", "roundhouse.loss.torch needs PyTorch: pip install 'roundhouse[torch]'")


class UnusableLoss(Exception):
    """The function returned something the trainer cannot use: the same call would again, so it is not retried."""


@dataclass(frozen=True, eq=False)
class LossDatum:
    """One target sequence of a row, as the trainer scored it: one entry per target token, the prompt's included."""

    logprobs: Vector
    weights: Vector
    row: Row
    row_index: int
    completion: str
    advantages: Vector | None = None
    sampler_logprobs: Vector | None = None
    # `round.custom.reference: start` (or a GRPO round's `reference: start`): the starting weights' logprob per token.
    reference_logprobs: Vector | None = None

    def completion_logprob(self) -> float:
        """The completion's logprob: its tokens' logprobs summed (the prompt's tokens weigh 0)."""
        return float(np.dot(self.logprobs, self.weights))

    @property
    def tokens(self) -> int:
        """How many tokens are trained: the completion's."""
        return int(np.count_nonzero(self.weights))


@dataclass(frozen=True, eq=False)
class TorchLossDatum:
    """A LossDatum as float64 tensors for `@roundhouse.loss.torch`: `logprobs` requires grad (its grad is the datum's
    gradient), the others are plain tensors."""

    logprobs: Tensor
    weights: Tensor
    row: Row
    row_index: int
    completion: str
    advantages: Tensor | None = None
    sampler_logprobs: Tensor | None = None
    reference_logprobs: Tensor | None = None

    def completion_logprob(self) -> Tensor:
        """The completion's logprob, differentiable: its tokens' logprobs summed."""
        return (self.logprobs * self.weights).sum()

    @property
    def tokens(self) -> int:
        """How many tokens are trained: the completion's."""
        return int(self.weights.count_nonzero())


class _Datum(Protocol):
    @property
    def row_index(self) -> int: ...
    @property
    def completion(self) -> str: ...


D = TypeVar("D", bound=_Datum)


class _Batch(Sequence[D]):
    """The datums in the order their gradients are returned, with the rows they came from."""

    def __init__(self, datums: Sequence[D], rows: list[Row], step: int | None, mode: Mode) -> None:
        self._datums = list(datums)
        self.rows = rows
        self.step = step  # the 0-based optimizer step the batch trains, or None in an evaluation
        self.mode: Mode = mode

    @overload
    def __getitem__(self, index: int) -> D: ...
    @overload
    def __getitem__(self, index: slice) -> list[D]: ...
    def __getitem__(self, index: int | slice) -> D | list[D]:
        return self._datums[index]

    def __len__(self) -> int:
        return len(self._datums)

    def __iter__(self) -> Iterator[D]:
        return iter(self._datums)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} datums of {len(self.rows)} rows, step {self.step}, {self.mode})"

    def by_row(self) -> list[dict[str, D]]:
        """Each row's datums by completion name ("chosen", "rejected", ...), in the rows' order."""
        rows: list[dict[str, D]] = [{} for _ in self.rows]
        for datum in self._datums:
            rows[datum.row_index][datum.completion] = datum
        return rows


class LossBatch(_Batch[LossDatum]):
    """What a loss is called with: a sequence of LossDatum, with `rows`, `step`, `mode` ("train" or "eval", where the
    gradients are not used) and `by_row()`."""


class TorchLossBatch(_Batch[TorchLossDatum]):
    """What a `@roundhouse.loss.torch` loss is called with: the batch's datums as tensors."""


@dataclass(frozen=True)
class LossOutput:
    """What a loss returns: the loss, d loss / d logprob for each datum (one array per datum in the batch's order, one
    entry per token, zero where the datum's weight is 0) and metrics to report by name."""

    loss: float
    gradients: Gradients
    metrics: Mapping[str, float] = field(default_factory=dict)


LossReturn = LossOutput | tuple[float, Gradients] | tuple[float, Gradients, Mapping[str, float]]


class LossFunction(Protocol):
    """A loss: the batch to a LossOutput, or a (loss, gradients[, metrics]) tuple, sync or async."""

    def __call__(self, batch: LossBatch, /) -> LossReturn | Awaitable[LossReturn]: ...


class TorchLossFunction(Protocol):
    """A loss written with PyTorch: the batch as tensors to the loss (a scalar tensor), or to the loss and metrics."""

    def __call__(self, batch: TorchLossBatch, /) -> Tensor | tuple[Tensor, Mapping[str, float | Tensor]]: ...


@dataclass(frozen=True)
class CheckedLoss:
    """A loss's return value as the trainer can use it; `gradients` is None in an evaluation (they are not used)."""

    loss: float
    metrics: dict[str, float]
    gradients: list[Vector] | None


def loss_batch(document: Mapping[str, Any], mode: str) -> LossBatch:
    """The batch file the TypeScript side wrote (`{step, rows, datums, context}`) as the function sees it, in `mode`.
    Its arrays are read-only, so that the checks of the function's gradients read the weights as they were sent. A
    malformed file raises KeyError, TypeError or ValueError."""
    if not _is_mode(mode):
        raise ValueError(f"mode {mode!r} is neither {' nor '.join(MODES)}")
    rows: list[Row] = list(document["rows"])
    datums = [_datum(index, datum, rows) for index, datum in enumerate(document["datums"])]
    step = document.get("step")
    return LossBatch(datums, rows, None if step is None else int(step), mode)


def _is_mode(value: str) -> TypeGuard[Mode]:
    return value in MODES


def _datum(index: int, datum: Mapping[str, Any], rows: list[Row]) -> LossDatum:
    def vector(name: str) -> Vector | None:
        values = datum.get(name)
        if values is None:
            return None
        array = np.array(values, dtype=np.float64)
        if array.shape != (len(datum["logprobs"]),):
            raise ValueError(f"datum {index}: {name} of shape {array.shape} for {len(datum['logprobs'])} logprobs")
        array.flags.writeable = False
        return array

    row = int(datum["row"])
    if not 0 <= row < len(rows):
        raise ValueError(f"datum {index}: row {row} is not one of the batch's {len(rows)} rows")
    logprobs, weights = vector("logprobs"), vector("weights")
    if logprobs is None or weights is None:
        raise ValueError(f"datum {index}: logprobs and weights are required")
    return LossDatum(
        logprobs=logprobs,
        weights=weights,
        row=rows[row],
        row_index=row,
        completion=str(datum["completion"]),
        advantages=vector("advantages"),
        sampler_logprobs=vector("sampler_logprobs"),
        reference_logprobs=vector("reference_logprobs"),
    )


def loss_output(returned: object) -> LossOutput:
    """The function's return value as a LossOutput: one already, or a (loss, gradients[, metrics]) tuple."""
    if isinstance(returned, LossOutput):
        return returned
    if isinstance(returned, tuple) and len(returned) in (2, 3):
        return LossOutput(*returned)
    raise UnusableLoss(
        f"it returned {_shown(returned)}; return roundhouse.LossOutput(loss, gradients, metrics) "
        "or a (loss, gradients[, metrics]) tuple"
    )


def checked(returned: object, batch: LossBatch) -> CheckedLoss:
    """The function's return value, checked against its batch; UnusableLoss says what is wrong, naming the metric, or
    the datum and the token. In an evaluation the gradients are not used: only their presence is checked."""
    output = loss_output(returned)
    loss = _finite(output.loss)
    if loss is None:
        raise UnusableLoss(f"the loss is {_shown(output.loss)}, not a finite number")
    metrics = _metrics(output.metrics)
    if output.gradients is None:
        raise UnusableLoss("the gradients are None: return one array per datum")
    return CheckedLoss(loss, metrics, _gradients(output.gradients, batch) if batch.mode == "train" else None)


def _metrics(metrics: object) -> dict[str, float]:
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise UnusableLoss(f"the metrics are {_shown(metrics)}, not a dict of names to numbers")
    finite: dict[str, float] = {}
    for name, value in metrics.items():
        number = _finite(value)
        if number is None:
            raise UnusableLoss(f"metric {name!r} is {_shown(value)}, not a finite number")
        finite[str(name)] = number
    return finite


def _gradients(gradients: object, batch: LossBatch) -> list[Vector]:
    if not isinstance(gradients, list | tuple | np.ndarray) or (
        isinstance(gradients, np.ndarray) and gradients.ndim == 0
    ):
        raise UnusableLoss(f"the gradients are {_shown(gradients)}, not a list of one array per datum")
    if len(gradients) != len(batch):
        raise UnusableLoss(
            f"{len(gradients)} gradients for {len(batch)} datums: return one per datum, in the batch's order"
        )
    return [_gradient(given, index, datum) for index, (given, datum) in enumerate(zip(gradients, batch, strict=True))]


def _gradient(given: object, index: int, datum: LossDatum) -> Vector:
    name = f"datum {index} (row {datum.row_index}, completion {datum.completion!r})"
    try:
        gradient = np.asarray(given, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise UnusableLoss(f"the gradient of {name} is not an array of numbers: {err}") from None
    if gradient.shape != datum.logprobs.shape:
        size = f"{gradient.shape[0]} entries" if gradient.ndim == 1 else f"shape {gradient.shape}"
        raise UnusableLoss(
            f"the gradient of {name} has {size} where its logprobs have {len(datum.logprobs)}: one per target token"
        )
    not_finite = np.flatnonzero(~np.isfinite(gradient))
    if not_finite.size:
        token = int(not_finite[0])
        raise UnusableLoss(f"gradient at token {token} of {name} is {float(gradient[token])!r}")
    on_prompt = np.flatnonzero((gradient != 0) & (datum.weights == 0))
    if on_prompt.size:
        token = int(on_prompt[0])
        raise UnusableLoss(
            f"gradient at token {token} of {name} is {float(gradient[token])!r} where its weight is 0 (a prompt "
            "token): only completion tokens are trained; multiply by the datum's weights"
        )
    return gradient


def _finite(value: object) -> float | None:
    """The value as a float when it is one finite real number (a Python or numpy scalar, a 0-d array), else None."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    if not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _shown(value: object) -> str:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return repr(float(value))
    return "None" if value is None else f"{type(value).__name__} {value!r}"[:200]


class TorchLoss:
    """A `@roundhouse.loss.torch` loss as the worker calls it: each datum's logprobs become a float64 tensor that
    requires grad, the function's loss is backpropagated (in train) and each datum's gradient is its logprobs' grad
    (zeros where the loss does not depend on them)."""

    __roundhouse_requires__ = TORCH

    def __init__(self, function: TorchLossFunction) -> None:
        self.__wrapped__ = function  # what inspect.signature, so `describe`, reads: the user's own signature
        self.__name__: str = getattr(function, "__name__", type(function).__name__)
        self.__doc__ = function.__doc__
        if inspect.iscoroutinefunction(function):
            raise TypeError(f"@roundhouse.loss.torch: {self.__name__} must be a plain def: its loss is backpropagated")

    def __call__(self, batch: LossBatch) -> LossOutput:
        torch = _torch()
        tensors = TorchLossBatch([_as_tensors(torch, d) for d in batch], batch.rows, batch.step, batch.mode)
        with torch.set_grad_enabled(batch.mode == "train"):  # an evaluation needs no graph
            returned: Any = self.__wrapped__(tensors)
        value, metrics = returned if isinstance(returned, tuple) and len(returned) == 2 else (returned, {})
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            raise UnusableLoss(
                f"it returned {_shown(returned)}; return the loss as a one-element torch.Tensor, or (loss, metrics)"
            )
        if value.requires_grad:
            value.backward()
        gradients = [np.zeros(len(d.logprobs)) if d.logprobs.grad is None else d.logprobs.grad.numpy() for d in tensors]
        if isinstance(metrics, Mapping):
            metrics = {name: _item(torch, metric) for name, metric in metrics.items()}
        return LossOutput(float(value.item()), gradients, metrics)


def _torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise ImportError(TORCH.problem) from err
    return torch


def _as_tensors(torch: Any, datum: LossDatum) -> TorchLossDatum:
    def tensor(values: Vector | None) -> Tensor | None:
        return None if values is None else torch.from_numpy(values.copy())  # a copy: the batch's arrays are read-only

    return TorchLossDatum(
        logprobs=torch.from_numpy(datum.logprobs.copy()).requires_grad_(),
        weights=torch.from_numpy(datum.weights.copy()),
        row=datum.row,
        row_index=datum.row_index,
        completion=datum.completion,
        advantages=tensor(datum.advantages),
        sampler_logprobs=tensor(datum.sampler_logprobs),
        reference_logprobs=tensor(datum.reference_logprobs),
    )


def _item(torch: Any, value: Any) -> Any:
    """A one-element tensor metric as a number; anything else as it is (the checks say what is wrong with it)."""
    return value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value


L = TypeVar("L", bound=LossFunction)


class RegistersTorchLoss(Protocol):
    """`@roundhouse.loss.torch`, bare or with `name=`: registers the adapted function and returns it (it takes a
    LossBatch and returns a LossOutput, as the worker calls it)."""

    @overload
    def __call__(self, function: TorchLossFunction, /) -> TorchLoss: ...
    @overload
    def __call__(self, *, name: str | None = None) -> Callable[[TorchLossFunction], TorchLoss]: ...


class RegistersLoss(Protocol):
    """`@roundhouse.loss`, bare or with `name=`: registers the function, returns it as is; `.torch` for PyTorch."""

    @property
    def torch(self) -> RegistersTorchLoss: ...
    @overload
    def __call__(self, function: L, /) -> L: ...
    @overload
    def __call__(self, *, name: str | None = None) -> Callable[[L], L]: ...


class _TorchLossDecorator:
    """Registers a PyTorch loss as a loss, adapted: the worker calls every loss alike."""

    __name__ = "loss.torch"

    @overload
    def __call__(self, function: TorchLossFunction, /) -> TorchLoss: ...
    @overload
    def __call__(
        self, function: None = None, /, *, name: str | None = None
    ) -> Callable[[TorchLossFunction], TorchLoss]: ...
    def __call__(
        self, function: TorchLossFunction | None = None, /, *, name: str | None = None
    ) -> TorchLoss | Callable[[TorchLossFunction], TorchLoss]:
        def add(f: TorchLossFunction) -> TorchLoss:
            adapted = TorchLoss(f)
            registry.add("loss", adapted, name)
            return adapted

        return add(function) if function is not None else add


class _LossDecorator(_Decorator):
    def __init__(self) -> None:
        super().__init__("loss")
        self.torch: RegistersTorchLoss = _TorchLossDecorator()


loss: RegistersLoss = _LossDecorator()
