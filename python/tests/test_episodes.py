from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import roundhouse
from roundhouse.activities import Activities
from roundhouse.episodes import (
    EpisodeRequest,
    EpisodeTooLong,
    GatewayFailed,
    GatewayTransport,
    _guard_rubric,
    _rubric_errors,
)
from roundhouse.registry import Registry


def test_a_reward_function_that_raises_inside_a_verifiers_rubric_is_noted_before_the_rubric_scores_it_0() -> None:
    vf = pytest.importorskip("verifiers")

    def judge(completion: Any, answer: str, **kwargs: Any) -> float:
        raise TimeoutError("the judge did not answer in time")

    async def fine(completion: Any) -> float:
        return 0.5

    rubric = vf.Rubric(funcs=[judge, fine])
    _guard_rubric(rubric)
    _guard_rubric(rubric)  # once only
    state: dict[str, Any] = {"prompt": [], "completion": [], "answer": "1", "info": {}}

    async def score() -> list[str]:
        raised: list[str] = []
        _rubric_errors.set(raised)
        await rubric.score_rollout(state)
        return raised

    raised = asyncio.run(score())
    # verifiers itself scores the failure 0.0; the episode knows it was a failure, not a 0.
    assert state["metrics"] == {"judge": 0.0, "fine": 0.5}
    assert raised == ["reward function 'judge' raised TimeoutError: the judge did not answer in time"]
    # The guarded functions keep the names and signatures the rubric chooses their arguments by.
    assert [f.__name__ for f in rubric.funcs] == ["judge", "fine"]


def test_the_transport_keeps_the_first_answer_an_episode_cannot_be_scored_after() -> None:
    transport = GatewayTransport("unused.json", "p0-c0")
    transport._note(200, b'{"id": "x"}')
    transport._note(400, b'{"error": {"code": "invalid_request", "message": "n: 2 is over the cap of 1"}}')
    assert transport.failure is None  # the environment's own mistakes are its outcome
    transport._note(500, b'{"error": {"code": "sampler_error", "message": "the round\'s sampler failed"}}')
    assert isinstance(transport.failure, GatewayFailed) and "500 sampler_error" in str(transport.failure)
    long = GatewayTransport("unused.json", "p0-c1")
    long._note(400, b'{"error": {"code": "context_length_exceeded", "message": "maximum context length is 64"}}')
    assert isinstance(long.failure, EpisodeTooLong)


def episodes(tmp_path: Path, answers: list[str]) -> EpisodeRequest:
    items = [
        {
            "key": f"e{i}",
            "prompt": [{"role": "user", "content": "2+2?"}],
            "answer": a,
            "row": {},
            "context": {"line": i},
        }
        for i, a in enumerate(answers)
    ]
    (tmp_path / "items.json").write_text(json.dumps({"items": items}))
    gateway = str(tmp_path / "gateway.json")  # never read: these environments make no model call
    return EpisodeRequest("game", str(tmp_path / "items.json"), str(tmp_path / "records"), gateway, "m", concurrency=2)


def test_episodes_are_recorded_per_key_and_read_back_and_a_failing_one_fails_the_step(
    tmp_path: Path, functions: Registry
) -> None:
    played: list[str] = []

    async def game(client: Any, prompt: Any, answer: str, row: dict[str, Any]) -> Any:
        played.append(answer)
        if answer == "boom":
            raise ConnectionError("the tool server went away")
        return roundhouse.unscorable("no move") if answer == "skip" else float(answer == "4")

    functions.add("environment", game, "game")
    request = episodes(tmp_path, ["4", "5", "skip"])
    first = asyncio.run(ActivityEnvironment().run(Activities(functions).episodes, request))
    assert (first.rewards, first.turns, first.computed, first.reused, first.unscorable) == (
        [1.0, 0.0, None],
        [[], [], []],
        3,
        0,
        1,
    )
    record = json.loads((tmp_path / "records" / "e2.json").read_text())
    assert list(record) == ["digest", "environment", "reward", "unscorable", "turns", "context"]
    assert (record["reward"], record["unscorable"], record["context"]) == (None, "no move", {"line": 2})
    again = asyncio.run(ActivityEnvironment().run(Activities(functions).episodes, request))
    assert (again.rewards, again.computed, again.reused, again.unscorable) == (first.rewards, 0, 3, 1)
    assert sorted(played) == ["4", "5", "skip"]

    failing = episodes(tmp_path, ["4", "boom"])
    with pytest.raises(ApplicationError) as failed:
        asyncio.run(ActivityEnvironment().run(Activities(functions).episodes, failing))
    assert failed.value.type == "EnvironmentFailed" and not failed.value.non_retryable
    assert "environment 'game' failed on line 1: ConnectionError: the tool server went away" in str(failed.value)
    assert played.count("4") == 1  # its record was read back
