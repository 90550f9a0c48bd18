from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from loss_examples import PROMPT_TOKENS, batch_document, dpo
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import roundhouse
from roundhouse.activities import Activities, DescribeRequest, FunctionRef, LossRequest
from roundhouse.loss import LossBatch, loss_batch
from roundhouse.registry import Registry, registry


def run(activity: Any, request: Any) -> Any:
    return asyncio.run(ActivityEnvironment().run(activity, request))


def loss_request(tmp_path: Path, function: str, mode: str = "train", nudge: float = 0.0) -> LossRequest:
    """The batch of loss_examples.batch_document at <tmp>/batch.json, recorded at <tmp>/record.json."""
    (tmp_path / "batch.json").write_text(json.dumps(batch_document(mode, nudge)))
    return LossRequest(function, str(tmp_path / "batch.json"), str(tmp_path / "record.json"), mode)


def recorded(request: LossRequest) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(Path(request.record).read_text())
    return record


def zeros(batch: LossBatch) -> list[np.ndarray]:
    return [np.zeros(len(d.logprobs)) for d in batch]


def with_token(batch: LossBatch, datum: int, token: int, value: float) -> list[np.ndarray]:
    """Zero gradients but one: `value` at the datum's token."""
    gradients = zeros(batch)
    gradients[datum][token] = value
    return gradients


def test_the_recorded_gradients_of_a_numpy_dpo_loss_are_its_finite_differences(
    tmp_path: Path, functions: Registry
) -> None:
    functions.add("loss", dpo)
    request = loss_request(tmp_path, "dpo")
    result = run(Activities(functions).loss, request)
    record = recorded(request)
    assert record["function"] == "dpo" and record["mode"] == "train" and record["loss"] == result.loss
    assert record["metrics"] == result.metrics and set(result.metrics) == {"margin", "accuracy"}
    assert result.record == request.record and result.datums == 4 and not result.reused

    batch = loss_batch(batch_document(), "train")

    def loss_moved(datum: int, token: int, by: float) -> float:
        datums = list(batch)
        logprobs = datums[datum].logprobs.copy()
        logprobs[token] += by
        datums[datum] = dataclasses.replace(datums[datum], logprobs=logprobs)
        return float(dpo(LossBatch(datums, batch.rows, batch.step, batch.mode)).loss)

    h = 1e-6
    for i, datum in enumerate(batch):
        numeric = [(loss_moved(i, t, h) - loss_moved(i, t, -h)) / (2 * h) for t in range(len(datum.logprobs))]
        assert record["gradients"][i] == pytest.approx(numeric, abs=1e-9)
        assert record["gradients"][i][:PROMPT_TOKENS] == [0.0, 0.0]
    assert any(g != 0 for gradient in record["gradients"] for g in gradient)


def test_a_recorded_loss_is_read_back_without_calling_the_function_and_another_batch_is_computed(
    tmp_path: Path, functions: Registry
) -> None:
    calls: list[int | None] = []

    def counted(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
        calls.append(batch.step)
        return dpo(batch)

    functions.add("loss", counted, name="dpo")
    request = loss_request(tmp_path, "dpo")
    first = run(Activities(functions).loss, request)
    again = run(Activities(functions).loss, request)
    assert again.reused and (again.loss, again.metrics, again.datums) == (first.loss, first.metrics, 4)
    assert calls == [3]
    # Other logprobs (the same step after the trainer moved on) are another batch: its record is made anew.
    moved = run(Activities(functions).loss, loss_request(tmp_path, "dpo", nudge=0.5))
    assert not moved.reused and moved.loss != first.loss and calls == [3, 3]
    assert recorded(request)["loss"] == moved.loss


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        pytest.param(lambda b: (math.nan, zeros(b)), "the loss is nan, not a finite number", id="nan-loss"),
        pytest.param(
            lambda b: (0.5, with_token(b, 1, 3, math.nan)),
            "gradient at token 3 of datum 1 (row 0, completion 'rejected') is nan",
            id="nan-gradient",
        ),
        pytest.param(
            lambda b: (0.5, zeros(b)[:3]),
            "3 gradients for 4 datums: return one per datum, in the batch's order",
            id="gradient-count",
        ),
        pytest.param(
            lambda b: (0.5, [np.zeros(3), *zeros(b)[1:]]),
            "the gradient of datum 0 (row 0, completion 'chosen') has 3 entries where its logprobs have 5: "
            "one per target token",
            id="gradient-length",
        ),
        pytest.param(
            lambda b: (0.5, with_token(b, 2, 0, 0.3)),
            "gradient at token 0 of datum 2 (row 1, completion 'chosen') is 0.3 where its weight is 0 (a prompt "
            "token): only completion tokens are trained; multiply by the datum's weights",
            id="prompt-token",
        ),
        pytest.param(
            lambda b: (0.5, zeros(b), {"accuracy": 1.0, "margin": math.inf}),
            "metric 'margin' is inf, not a finite number",
            id="metric",
        ),
        pytest.param(
            lambda b: 0.5,
            "it returned 0.5; return roundhouse.LossOutput(loss, gradients, metrics) "
            "or a (loss, gradients[, metrics]) tuple",
            id="not-an-output",
        ),
    ],
)
def test_a_return_the_trainer_cannot_use_fails_for_good_naming_the_step_datum_and_token(
    tmp_path: Path, functions: Registry, returned: Callable[[LossBatch], Any], said: str
) -> None:
    functions.add("loss", returned, name="bad")
    request = loss_request(tmp_path, "bad")
    with pytest.raises(ApplicationError) as failed:
        run(Activities(functions).loss, request)
    assert failed.value.type == "LossFailed" and failed.value.non_retryable
    assert failed.value.message == f"loss 'bad' returned an unusable result at step 4: {said}"
    assert not Path(request.record).exists()


def test_a_loss_that_raises_fails_to_be_retried_naming_the_step(tmp_path: Path, functions: Registry) -> None:
    def simpo(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
        raise ValueError("no rejected completion in row 1")

    functions.add("loss", simpo)
    request = loss_request(tmp_path, "simpo")
    with pytest.raises(ApplicationError) as failed:
        run(Activities(functions).loss, request)
    error = "ValueError: no rejected completion in row 1"
    assert failed.value.type == "LossFailed" and not failed.value.non_retryable
    assert failed.value.message == f"loss 'simpo' failed at step 4: {error}"
    assert failed.value.details[0] == {"function": "simpo", "step": 4, "error": error}
    assert not Path(request.record).exists()


def test_an_evaluation_records_the_loss_and_metrics_and_no_gradients(tmp_path: Path, functions: Registry) -> None:
    seen: list[tuple[str, int | None]] = []

    def forward_only(batch: roundhouse.LossBatch) -> tuple[float, list[np.ndarray], dict[str, float]]:
        seen.append((batch.mode, batch.step))
        return 0.25, zeros(batch)[:1], {"margin": 0.5}  # the gradients of an evaluation are not used

    functions.add("loss", forward_only)
    request = loss_request(tmp_path, "forward_only", mode="eval")
    result = run(Activities(functions).loss, request)
    assert (result.loss, result.metrics, result.reused) == (0.25, {"margin": 0.5}, False)
    assert seen == [("eval", None)]
    record = recorded(request)
    assert record["mode"] == "eval" and "gradients" not in record


def test_a_loss_may_return_a_pair_or_a_triple_and_may_be_async(tmp_path: Path, functions: Registry) -> None:
    def pair(batch: roundhouse.LossBatch) -> tuple[float, list[np.ndarray]]:
        return 1.5, zeros(batch)

    def triple(batch: roundhouse.LossBatch) -> tuple[float, list[np.ndarray], dict[str, float]]:
        return np.float64(2.5), [-d.weights for d in batch], {"tokens": np.int64(12)}

    async def awaited(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
        await asyncio.sleep(0)
        return roundhouse.LossOutput(3.5, zeros(batch))

    for function in (pair, triple, awaited):
        functions.add("loss", function)
    results = {}
    for name in ("pair", "triple", "awaited"):
        (tmp_path / name).mkdir()
        request = loss_request(tmp_path / name, name)
        results[name] = run(Activities(functions).loss, request)
        assert len(recorded(request)["gradients"]) == 4
    assert {name: (r.loss, r.metrics) for name, r in results.items()} == {
        "pair": (1.5, {}),
        "triple": (2.5, {"tokens": 12.0}),
        "awaited": (3.5, {}),
    }


def test_a_missing_loss_or_batch_fails_for_good_as_invalid_input(tmp_path: Path, functions: Registry) -> None:
    functions.add("loss", dpo)
    for request in (
        loss_request(tmp_path, "simpo"),
        LossRequest("dpo", str(tmp_path / "gone.json"), str(tmp_path / "record.json")),
        loss_request(tmp_path, "dpo", mode="test"),
    ):
        with pytest.raises(ApplicationError) as failed:
            run(Activities(functions).loss, request)
        assert failed.value.type == "InvalidInput" and failed.value.non_retryable


def test_describe_refuses_a_loss_that_cannot_take_a_batch(functions: Registry) -> None:
    def with_reference(batch: roundhouse.LossBatch, reference: roundhouse.LossBatch) -> roundhouse.LossOutput:
        return dpo(batch)

    functions.add("loss", dpo)
    functions.add("loss", with_reference)
    request = DescribeRequest([FunctionRef("loss", "dpo"), FunctionRef("loss", "with_reference")])
    result = run(Activities(functions).describe, request)
    assert [f.ok for f in result.functions] == [True, False]
    assert "cannot take (batch)" in (result.functions[1].problem or "")
    assert result.registered["loss"] == ["dpo", "with_reference"]


def test_the_loss_decorator_registers_the_function_as_it_is_bare_or_by_name() -> None:
    @roundhouse.loss
    def plain(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
        return dpo(batch)

    @roundhouse.loss(name="simpo")
    def named(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
        return dpo(batch)

    try:
        assert registry.names("loss") == ["plain", "simpo"]
        found = registry.get("loss", "simpo")
        assert found is not None and found.function is named and found.problem() is None
        assert plain(loss_batch(batch_document(), "train")).loss == dpo(loss_batch(batch_document(), "train")).loss
    finally:
        registry.clear()


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed here")
def test_a_torch_loss_on_a_worker_without_torch_is_refused_before_any_spend() -> None:
    @roundhouse.loss.torch(name="torch_dpo")
    def written_with_torch(batch: roundhouse.TorchLossBatch) -> Any:
        return sum(d.completion_logprob() for d in batch)

    missing = "roundhouse.loss.torch needs PyTorch: pip install 'roundhouse[torch]'"
    try:
        result = run(Activities().describe, DescribeRequest([FunctionRef("loss", "torch_dpo")]))
        described = result.functions[0]
        assert not described.ok and described.problem == missing
        assert described.signature == "torch_dpo(batch: roundhouse.loss.TorchLossBatch) -> Any"
        with pytest.raises(ImportError, match=r"needs PyTorch: pip install 'roundhouse\[torch\]'"):
            written_with_torch(loss_batch(batch_document(), "train"))
    finally:
        registry.clear()


def test_reference_logprobs_reach_each_datum_and_a_wrong_length_is_refused() -> None:
    document = batch_document()
    for datum in document["datums"]:
        datum["reference_logprobs"] = [-1.0] * len(datum["logprobs"])
    batch = loss_batch(document, "train")
    reference = batch[0].reference_logprobs
    assert reference is not None and float(np.dot(reference, batch[0].weights)) == -3.0
    assert batch_document()["datums"][0].get("reference_logprobs") is None
    document["datums"][1]["reference_logprobs"] = [-1.0]
    with pytest.raises(ValueError, match="datum 1: reference_logprobs of shape"):
        loss_batch(document, "train")
