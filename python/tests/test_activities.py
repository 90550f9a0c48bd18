from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import roundhouse
from roundhouse.activities import (
    Activities,
    DescribeRequest,
    FunctionRef,
    NextDataRequest,
    ScoreRequest,
    masked,
)
from roundhouse.registry import Registry
from roundhouse.sandbox import isolation


def batch(tmp_path: Path, completions: list[str], answer: str = "4") -> ScoreRequest:
    items = [
        {
            "key": f"s0000000/p0-c{i}",
            "completion": c,
            "answer": answer,
            "prompt": "2+2?",
            "row": {"prompt": "2+2?", "answer": answer, "level": 1},
            "context": {"step": 1, "prompt": 0, "sample": i, "line": 3},
        }
        for i, c in enumerate(completions)
    ]
    (tmp_path / "items.json").write_text(json.dumps({"items": items}))
    return ScoreRequest(
        function="f", items=str(tmp_path / "items.json"), records=str(tmp_path / "records"), concurrency=4
    )


def run(activity: Any, request: Any) -> Any:
    return asyncio.run(ActivityEnvironment().run(activity, request))


def test_rewards_are_recorded_per_sample_and_read_back_instead_of_recomputed(
    tmp_path: Path, functions: Registry
) -> None:
    calls: list[str] = []

    def f(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
        calls.append(completion)
        sample = roundhouse.current_sample()
        assert sample is not None and sample["line"] == 3 and row["level"] == 1
        return float(completion == answer)

    functions.add("reward", f)
    request = batch(tmp_path, ["4", "5", "four"])
    first = run(Activities(functions).rewards, request)
    assert first.values == [1.0, 0.0, 0.0] and first.computed == 3 and first.reused == 0
    record = json.loads((tmp_path / "records" / "s0000000" / "p0-c1.json").read_text())
    assert record["value"] == 0.0 and record["function"] == "f" and record["context"]["sample"] == 1
    again = run(Activities(functions).rewards, request)
    assert again.values == first.values and again.computed == 0 and again.reused == 3
    assert sorted(calls) == ["4", "5", "four"]  # computed concurrently
    # A record for other inputs (a re-sampled completion under the same key) is not reused.
    changed = batch(tmp_path, ["4", "4", "four"])
    assert run(Activities(functions).rewards, changed).values == [1.0, 1.0, 0.0]
    assert calls[3:] == ["4"]


def test_a_raising_function_fails_the_batch_as_RewardFailed_keeping_what_it_scored(
    tmp_path: Path, functions: Registry
) -> None:
    def f(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
        if completion == "boom":
            raise TimeoutError("judge timed out")
        return 1.0

    functions.add("reward", f)
    request = batch(tmp_path, ["4", "boom", "4"])
    with pytest.raises(ApplicationError) as failed:
        run(Activities(functions).rewards, request)
    assert failed.value.type == "RewardFailed" and not failed.value.non_retryable
    assert "reward 'f' failed on step 1, prompt 0, sample 1, line 3: TimeoutError: judge timed out" in str(failed.value)
    assert failed.value.details[0]["row"]["level"] == 1
    recorded = sorted(p.name for p in (tmp_path / "records" / "s0000000").iterdir())
    assert recorded == ["p0-c0.json", "p0-c2.json"]  # the retry computes only the failed sample


def test_unscorable_is_explicit_and_anything_else_that_is_not_a_number_fails_for_good(
    tmp_path: Path, functions: Registry
) -> None:
    def f(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> Any:
        return {"skip": roundhouse.unscorable("no final answer"), "true": True, "none": None}.get(completion, 0.5)

    functions.add("scorer", f)
    result = run(Activities(functions).scores, batch(tmp_path, ["skip", "true", "x"]))
    assert result.values == [None, 1.0, 0.5] and result.unscorable == 1
    assert result.unscorable_reasons == ["no final answer"]
    (tmp_path / "again").mkdir()
    with pytest.raises(ApplicationError) as failed:
        run(Activities(functions).scores, batch(tmp_path / "again", ["none"]))
    assert failed.value.type == "ScorerFailed" and failed.value.non_retryable
    assert "returned None" in str(failed.value)


def test_async_functions_run_concurrently_up_to_the_limit(tmp_path: Path, functions: Registry) -> None:
    running = 0
    most = 0

    async def f(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.05)
        running -= 1
        return 1.0

    functions.add("reward", f)
    result = run(Activities(functions).rewards, batch(tmp_path, [str(i) for i in range(10)]))
    assert result.computed == 10 and most == 4


def test_describe_says_what_is_missing_or_unfit(functions: Registry) -> None:
    def ok(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
        return 0.0

    def short(completion: str) -> float:
        return 0.0

    functions.add("reward", ok)
    functions.add("scorer", short)
    request = DescribeRequest(
        functions=[FunctionRef("reward", "ok"), FunctionRef("scorer", "short"), FunctionRef("data_policy", "gone")]
    )
    result = run(Activities(functions).describe, request)
    assert [f.ok for f in result.functions] == [True, False, False]
    assert "cannot take (completion, answer, prompt, row)" in (result.functions[1].problem or "")
    assert result.functions[2].problem == "no data_policy named 'gone' is registered (registered: none)"
    assert result.registered == {
        "reward": ["ok"],
        "scorer": ["short"],
        "data_policy": [],
        "environment": [],
        "loss": [],
    }
    assert result.sandbox == isolation()  # the mode this worker runs, or "refused: <why>"


STRICT_ENVIRONMENT = """
import verifiers as vf
from datasets import Dataset


def load_environment(turns: int = 3) -> vf.Environment:
    if turns < 1:
        raise ValueError(f"turns must be at least 1, not {turns}")
    dataset = Dataset.from_list([{"question": "Say a number.", "answer": "0"}])
    return vf.SingleTurnEnv(dataset=dataset, rubric=vf.Rubric(funcs=[]))
"""


def test_describe_loads_a_verifiers_environment_with_its_args(
    tmp_path: Path, functions: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "vf_strict_args_game.py").write_text(STRICT_ENVIRONMENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    name = "verifiers:vf_strict_args_game"
    request = DescribeRequest(
        functions=[
            FunctionRef("environment", name, {"turns": 2}),
            FunctionRef("environment", name, {"turnz": 2}),
            FunctionRef("environment", name, {"turns": 0}),
            FunctionRef("environment", "verifiers:vf_no_such_game", {}),
        ]
    )
    result = run(Activities(functions).describe, request)
    assert [(f.ok, f.field) for f in result.functions] == [
        (True, "args"),
        (False, "args"),
        (False, "args"),
        (False, "name"),
    ]
    assert "unexpected keyword argument 'turnz'" in (result.functions[1].problem or "")
    assert result.functions[1].problem.startswith('load_environment(**{"turnz": 2}) failed: ')  # type: ignore[union-attr]
    assert "turns must be at least 1, not 0" in (result.functions[2].problem or "")
    assert "no module named 'vf_no_such_game'" in (result.functions[3].problem or "")


def test_a_data_policy_gets_pool_rows_with_their_results_and_its_rows_are_written_once(
    tmp_path: Path, functions: Registry
) -> None:
    seen: list[Any] = []

    def wrong_ones(pool: list[dict[str, Any]], results: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
        seen.append(results)
        return [row for row, r in zip(pool, results, strict=True) if r is not None and not r["match"]]

    functions.add("data_policy", wrong_ones)
    pool = tmp_path / "pool.jsonl"
    pool.write_text(
        '{"prompt": "a", "answer": "1"}\n\n{"prompt": "b", "answer": "2"}\n{"prompt": "c", "answer": "3"}\n'
    )
    results = tmp_path / "pool-evaluations.json"
    results.write_text(json.dumps([{"line": 1, "match": True}, {"line": 3, "match": False}]))
    request = NextDataRequest("wrong_ones", str(pool), str(results), str(tmp_path / "out.jsonl"), 2)
    first = run(Activities(functions).next_data, request)
    assert first.rows == 1 and not first.reused
    assert (tmp_path / "out.jsonl").read_text() == '{"prompt": "b", "answer": "2"}\n'
    assert seen[0] == [{"line": 1, "match": True}, {"line": 3, "match": False}, None]
    again = run(Activities(functions).next_data, request)
    assert again.rows == 1 and again.reused and len(seen) == 1


def test_secrets_in_the_environment_are_masked_in_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_API_KEY", "sk-very-secret-value")
    assert masked("401 for key sk-very-secret-value") == "401 for key ***"


def test_a_verifiers_error_the_model_caused_is_the_episodes_outcome_and_any_other_is_infrastructure() -> None:
    vf = pytest.importorskip("verifiers")
    from roundhouse.episodes import _model_outcome

    assert _model_outcome(vf, {"error": "EmptyModelResponseError"})
    assert _model_outcome(vf, {"error": "InvalidModelResponseError"})
    assert not _model_outcome(vf, {"error": "InfraError"})
    assert not _model_outcome(vf, {"error": "ModelError"})  # a provider failure verifiers wrapped
    assert not _model_outcome(vf, {"error": "SomethingNew"})
