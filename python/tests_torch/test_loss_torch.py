"""`@roundhouse.loss.torch`: a loss computed with PyTorch gives the worker what the same loss in numpy gives it.

Outside the default suite (CI does not install torch), and free of temporalio: run with a Python that has torch,
`PYTHONPATH=src python -m pytest tests_torch -q -p no:cacheprovider` from python/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from loss_examples import BETA, batch_document, cross_entropy, dpo

import roundhouse
from roundhouse.loss import CheckedLoss, LossBatch, TorchLoss, UnusableLoss, checked, loss_batch
from roundhouse.registry import registry

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _own_registry() -> Iterator[None]:
    yield
    registry.clear()  # the decorators register in the process's registry


def torch_dpo(batch: roundhouse.TorchLossBatch) -> tuple[Any, dict[str, Any]]:
    """loss_examples.dpo, left to autograd."""
    margins = torch.stack(
        [
            BETA
            * (
                (pair["chosen"].completion_logprob() - row["reference"]["chosen"])
                - (pair["rejected"].completion_logprob() - row["reference"]["rejected"])
            )
            for pair, row in zip(batch.by_row(), batch.rows, strict=True)
        ]
    )
    metrics = {"margin": margins.mean(), "accuracy": (margins > 0).double().mean()}
    return torch.nn.functional.softplus(-margins).mean(), metrics


def torch_cross_entropy(batch: roundhouse.TorchLossBatch) -> Any:
    tokens = sum(d.tokens for d in batch)
    return -sum(d.completion_logprob() for d in batch) / tokens


def train_batch() -> LossBatch:
    return loss_batch(batch_document(), "train")


def assert_same(adapted: CheckedLoss, numpy: CheckedLoss) -> None:
    assert adapted.loss == pytest.approx(numpy.loss, abs=1e-12)
    assert adapted.gradients is not None and numpy.gradients is not None
    for mine, theirs in zip(adapted.gradients, numpy.gradients, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-9)


def test_a_torch_dpo_gives_the_numpy_dpos_loss_gradients_and_metrics() -> None:
    adapted = roundhouse.loss.torch(name="dpo")(torch_dpo)
    batch = train_batch()
    mine, theirs = checked(adapted(batch), batch), checked(dpo(batch), batch)
    assert_same(mine, theirs)
    assert mine.metrics.keys() == theirs.metrics.keys()
    assert mine.metrics == pytest.approx(theirs.metrics, abs=1e-12)
    assert all(type(value) is float for value in mine.metrics.values())


def test_a_torch_cross_entropy_gives_the_numpy_ones_gradients() -> None:
    @roundhouse.loss.torch
    def supervised(batch: roundhouse.TorchLossBatch) -> Any:
        return torch_cross_entropy(batch)

    batch = train_batch()
    assert_same(checked(supervised(batch), batch), checked(cross_entropy(batch), batch))


def test_a_torch_loss_is_registered_as_a_loss_with_its_own_signature() -> None:
    @roundhouse.loss.torch(name="sft")
    def supervised(batch: roundhouse.TorchLossBatch) -> Any:
        return torch_cross_entropy(batch)

    found = registry.get("loss", "sft")
    assert found is not None and found.function is supervised and isinstance(supervised, TorchLoss)
    assert found.problem() is None  # torch is installed here
    assert found.signature() == "sft(batch: roundhouse.loss.TorchLossBatch) -> Any"
    assert not found.is_async


def test_a_datum_the_loss_does_not_reach_gets_zero_gradients() -> None:
    @roundhouse.loss.torch
    def chosen_only(batch: roundhouse.TorchLossBatch) -> Any:
        return -sum(d.completion_logprob() for d in batch if d.completion == "chosen")

    batch = train_batch()
    result = checked(chosen_only(batch), batch)
    assert result.gradients is not None
    for datum, gradient in zip(batch, result.gradients, strict=True):
        expected = -datum.weights if datum.completion == "chosen" else np.zeros(len(datum.logprobs))
        np.testing.assert_array_equal(gradient, expected)


def test_metrics_pass_through_as_numbers() -> None:
    @roundhouse.loss.torch
    def with_metrics(batch: roundhouse.TorchLossBatch) -> tuple[Any, dict[str, Any]]:
        loss = torch_cross_entropy(batch)
        return loss, {"loss": loss, "datums": len(batch), "scale": 0.5}

    batch = train_batch()
    output = with_metrics(batch)
    assert output.metrics == {"loss": output.loss, "datums": 4, "scale": 0.5}
    assert checked(output, batch).metrics["loss"] == output.loss


def test_an_evaluation_takes_no_backward_pass() -> None:
    @roundhouse.loss.torch
    def graphless(batch: roundhouse.TorchLossBatch) -> Any:
        assert not torch.is_grad_enabled()
        return torch_cross_entropy(batch)

    batch = loss_batch(batch_document(mode="eval"), "eval")
    output = graphless(batch)
    assert output.loss == pytest.approx(cross_entropy(batch).loss, abs=1e-12)
    assert checked(output, batch).gradients is None
    assert all(not np.any(gradient) for gradient in output.gradients)


def test_a_loss_that_is_no_scalar_tensor_is_unusable_and_an_async_one_is_refused() -> None:
    @roundhouse.loss.torch
    def per_token(batch: roundhouse.TorchLossBatch) -> Any:
        return torch.cat([d.logprobs for d in batch])

    with pytest.raises(UnusableLoss, match=r"return the loss as a one-element torch\.Tensor"):
        per_token(train_batch())
    with pytest.raises(TypeError, match="must be a plain def"):

        @roundhouse.loss.torch
        async def awaited(batch: roundhouse.TorchLossBatch) -> Any:
            return torch_cross_entropy(batch)
