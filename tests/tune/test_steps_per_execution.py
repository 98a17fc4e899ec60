"""The steps_per_execution trial picks one of its candidates, the smallest near the fastest."""

from __future__ import annotations

import pytest


def test_steps_per_execution_trial_picks_a_candidate(float32_policy):
    from tfopt.models import build_model
    from tfopt.tune.steps_per_execution import tune_steps_per_execution

    chosen, rates = tune_steps_per_execution(lambda: build_model("mlp", 16, 3), batch_size=8,
                                             image_size=16, classes=3, candidates=(1, 4))
    assert set(rates) == {1, 4} and all(rate > 0 for rate in rates.values())
    assert chosen in rates
    assert rates[chosen] >= 0.97 * max(rates.values())


def test_bad_candidates_are_refused_before_any_model_is_built():
    from tfopt.errors import InvalidArgumentError
    from tfopt.tune.steps_per_execution import tune_steps_per_execution

    def never():
        raise AssertionError("a model was built")

    with pytest.raises(InvalidArgumentError, match="candidates=0"):
        tune_steps_per_execution(never, 8, 16, 3, candidates=(1, 0))
    with pytest.raises(InvalidArgumentError, match="candidates=()"):
        tune_steps_per_execution(never, 8, 16, 3, candidates=())


def test_trial_steps_counts_the_warm_up_calls_and_the_timed_passes():
    from tfopt.tune.steps_per_execution import SPE_TRIAL_ROUNDS, trial_steps

    # per candidate: one warm-up call of that many steps, then the timed passes of 16 steps
    assert trial_steps((1, 4, 16)) == 1 + 4 + 16 + 3 * SPE_TRIAL_ROUNDS * 16
    assert trial_steps((32,)) == 32 + SPE_TRIAL_ROUNDS * 32  # a pass is a whole call or more
