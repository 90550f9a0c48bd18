from __future__ import annotations

import asyncio
from typing import Any

import pytest

from roundhouse.episodes import EpisodeTooLong, GatewayFailed, GatewayTransport, _guard_rubric, _rubric_errors


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
