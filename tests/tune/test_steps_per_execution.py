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
