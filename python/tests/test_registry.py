from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import roundhouse
from roundhouse.registry import Registry, registry


def test_decorators_register_plain_and_async_functions_by_name() -> None:
    @roundhouse.reward
    def exact_match(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
        return float(completion == answer)

    @roundhouse.scorer(name="judge")
    async def llm_judge(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> bool:
        return True

    @roundhouse.data_policy
    def keep_all(pool: list[dict[str, Any]], results: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
        return pool

    try:
        assert registry.get("reward", "exact_match") is not None
        judge = registry.get("scorer", "judge")
        assert judge is not None and judge.is_async
        assert registry.get("scorer", "llm_judge") is None
        assert registry.names("data_policy") == ["keep_all"]
        # The decorators return the function itself: it stays callable as written.
        assert exact_match("4", "4", "2+2?", {}) == 1.0
    finally:
        registry.clear()


def test_a_signature_that_cannot_take_the_roles_arguments_is_a_problem(functions: Registry) -> None:
    def two(completion: str, answer: str) -> float:
        return 0.0

    def flexible(completion: str, *rest: Any, **extra: Any) -> float:
        return 0.0

    def keyword_only(*, completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
        return 0.0

    assert "cannot take (completion, answer, prompt, row)" in (functions.add("reward", two).problem() or "")
    assert functions.add("reward", flexible).problem() is None
    assert functions.add("reward", keyword_only).problem() is not None
    policy = functions.add("data_policy", two, name="policy")
    assert policy.problem() is None  # (pool, results)
    assert functions.add("reward", two).signature() == "two(completion: str, answer: str) -> float"


def test_the_same_name_twice_for_different_functions_is_refused(functions: Registry) -> None:
    functions.add("reward", len, name="n")
    functions.add("reward", len, name="n")  # the same function again (a module imported twice) is fine
    with pytest.raises(ValueError, match="registered twice"):
        functions.add("reward", abs, name="n")
    with pytest.raises(ValueError, match="unknown role"):
        functions.add("judge", len)  # type: ignore[arg-type]


def test_an_environment_is_an_async_rollout_over_a_client(functions: Registry) -> None:
    async def rollout(client: Any, prompt: Any, answer: str, row: dict[str, Any]) -> float:
        return 0.0

    def blocking(client: Any, prompt: Any, answer: str, row: dict[str, Any]) -> float:
        return 0.0

    assert functions.add("environment", rollout).problem() is None
    assert "must be async def" in (functions.add("environment", blocking).problem() or "")


TYPED_USER_MODULE = """
from pathlib import Path
from typing import Any

import roundhouse


@roundhouse.reward
def exact(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float:
    return 1.0


@roundhouse.scorer(name="correct")
async def correct(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> bool:
    return True


@roundhouse.reward
def skip(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> roundhouse.Unscorable | float:
    return roundhouse.unscorable("no final answer")


@roundhouse.data_policy
def keep(pool: list[dict[str, Any]], results: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    return pool


@roundhouse.environment
async def game(client: Any, prompt: Any, answer: str, row: dict[str, Any]) -> float:
    return 0.0


@roundhouse.loss
def sft(batch: roundhouse.LossBatch) -> roundhouse.LossOutput:
    tokens = sum(d.tokens for d in batch)
    return roundhouse.LossOutput(-sum(d.completion_logprob() for d in batch) / tokens, [-d.weights for d in batch])


@roundhouse.loss(name="pairs")
def pairs(batch: roundhouse.LossBatch) -> tuple[float, list[Any], dict[str, float]]:
    return 0.0, [d.weights * 0 for d in batch], {"rows": len(batch.by_row())}


@roundhouse.loss.torch
def torch_sft(batch: roundhouse.TorchLossBatch) -> Any:
    return sum(d.completion_logprob() for d in batch)


reveal_type(exact)


@roundhouse.reward
def two_args(completion: str, answer: str) -> float:  # unfit
    return 0.0


@roundhouse.scorer
def words(completion: str, answer: str, prompt: str, row: dict[str, Any]) -> str:  # unfit
    return ""


@roundhouse.environment
def sync_game(client: Any, prompt: Any, answer: str, row: dict[str, Any]) -> float:  # unfit
    return 0.0


@roundhouse.data_policy
def one_row(pool: list[dict[str, Any]], results: list[dict[str, Any] | None]) -> dict[str, Any]:  # unfit
    return {}


@roundhouse.loss
def two_batches(batch: roundhouse.LossBatch, other: roundhouse.LossBatch) -> roundhouse.LossOutput:  # unfit
    return roundhouse.LossOutput(0.0, [])
"""


def test_mypy_holds_a_decorated_function_to_its_role_and_keeps_its_own_type(tmp_path: Path) -> None:
    mypy = pytest.importorskip("mypy.api")
    module = tmp_path / "user_functions.py"
    module.write_text(TYPED_USER_MODULE)
    # The package's own mypy cache (checks.js and python-tests.js fill it), so only this module is new.
    cache = Path(__file__).resolve().parents[1] / ".mypy_cache"
    out, _, status = mypy.run(["--strict", "--no-error-summary", f"--cache-dir={cache}", str(module)])
    lines = out.splitlines()
    assert status == 1, out
    revealed = [line for line in lines if "Revealed type" in line]
    assert (
        len(revealed) == 1
        and "def (completion: str, answer: str, prompt: str, row: dict[str, Any]) -> float" in revealed[0]
    )
    decorated = sorted(int(line.split(":")[1]) for line in lines if "error: No overload variant" in line)
    unfit = [n for n, text in enumerate(TYPED_USER_MODULE.split("\n"), start=1) if "# unfit" in text]
    assert decorated == [n - 1 for n in unfit], out  # the decorator's line, and no other
    assert all("note:" in line or "error: No overload variant" in line for line in lines), out
