"""The ranking of tfopt profile's changes: pure rules, no TensorFlow."""

import dataclasses

from tfopt.profile.advice import WORTH, Recommendation, rank, recommend

BASE = dict(input_share=0.0, fit_rate=100.0, step_rate=100.0, input_rate=None, source="dataset",
            bottleneck=None, pipeline_advice=[], policy="float32", machine_policy=("float32", "no bf16"),
            peak_ratio=None, jit=True, blockers=[], axes=[], jit_refused=False,
            steps_per_execution=4, step_seconds=0.1, unaligned=[], gpus=0)


def kinds(found):
    return [r.kind for r in found]


def test_a_tuned_fit_gets_nothing():
    assert recommend(**BASE) == []


def test_input_waits_come_first_with_the_measured_bound_and_noise_is_not_advice():
    found = recommend(**{**BASE, "input_share": 0.3, "fit_rate": 70.0, "jit": False,
                         "steps_per_execution": 1, "step_seconds": 0.001})
    assert kinds(found) == ["input_pipeline", "xla", "steps_per_execution"]
    assert abs(found[0].expected_speedup - 100 / 70) < 1e-9
    assert "tfopt.optimize(train_ds)" in found[0].code
    assert recommend(**{**BASE, "input_share": 0.03, "fit_rate": 97.0}) == []
    # the input alone: a dataset's is tfopt.analyze's rate over whole passes, and said so
    waits = {**BASE, "input_share": 0.3, "fit_rate": 70.0, "input_rate": 65.0}
    assert "the input alone gives 65 examples/s over whole passes" in \
        recommend(**waits)[0].message
    assert "the input alone gives 65 examples/s;" in \
        recommend(**{**waits, "source": "arrays"})[0].message + ";"


def test_half_precision_is_estimated_from_a_gpus_peaks_and_capped():
    found = recommend(**{**BASE, "machine_policy": ("mixed_float16", "tensor cores"),
                         "peak_ratio": 4.0, "input_share": 0.0, "gpus": 1})
    assert kinds(found) == ["precision"] and found[0].expected_speedup == 2.0
    assert "mixed_float16" in found[0].code


def test_on_a_cpu_half_precision_is_left_to_a_trial_after_what_the_fit_points_at():
    bf16 = {**BASE, "machine_policy": ("mixed_bfloat16", "AVX512-BF16"), "peak_ratio": 2.0}
    found = recommend(**bf16)
    assert kinds(found) == ["precision"] and found[0].expected_speedup is None
    assert "mixed_bfloat16" in found[0].code and "trial" in found[0].basis
    # layers that block XLA, a step short enough for the per-call overhead: named before it
    found = recommend(**{**bf16, "jit": False, "blockers": ["text_vectorization"],
                         "steps_per_execution": 1, "step_seconds": 0.001})
    assert kinds(found) == ["xla", "steps_per_execution", "precision"]
    # measured under --try, it takes its place by its gain
    measured = [dataclasses.replace(r, measured_speedup=speed, same_training=True)
                for r, speed in zip(found, (1.1, 1.3, 1.6), strict=True)]
    assert kinds(rank(measured)) == ["precision", "steps_per_execution", "xla"]


def test_xla_blocked_by_layers_names_them_even_when_the_script_turned_it_off():
    found = recommend(**{**BASE, "jit": False, "jit_refused": True,
                         "blockers": ["text_vectorization"]})
    assert kinds(found) == ["xla"] and "text_vectorization" in found[0].message
    assert recommend(**{**BASE, "jit": False, "jit_refused": True}) == []


def test_measured_changes_under_the_bar_or_computing_otherwise_are_dropped():
    faster = Recommendation("steps_per_execution", "m", "c", None, measured_speedup=1.8,
                            same_training=True)
    slower = Recommendation("xla", "m", "c", None, measured_speedup=0.4, same_training=True)
    noise = Recommendation("precision", "m", "c", 1.6, measured_speedup=WORTH - 0.01,
                           same_training=True)
    wrong = Recommendation("precision", "m", "c", 1.6, measured_speedup=1.9,
                           same_training=False)
    untried = Recommendation("alignment", "m", "c", None)
    assert rank([slower, noise, wrong, untried, faster]) == [faster]
    assert "measured_speedup" not in untried.to_json()


def test_a_cache_after_random_stages_is_named_first_and_analyzes_fix_joins_the_input_advice():
    advice = [{"kind": "parallelize", "stage": "map#1", "expected_speedup": 1.9,
               "message": "map#1 runs one element at a time"},
              {"kind": "cache_after_random", "stage": "cache#3", "expected_speedup": 1.0,
               "message": "cache#3 caches what map#2 drew at random"}]
    found = recommend(**{**BASE, "pipeline_advice": advice, "input_share": 0.4,
                         "fit_rate": 60.0})
    assert kinds(found) == ["cache_after_random", "input_pipeline"]
    assert "map#1 runs one element at a time" in found[1].message


def test_under_try_a_warning_and_what_no_copy_can_time_are_kept_and_the_warning_comes_first():
    warning = Recommendation("cache_after_random", "m", "c", None, measurable=False)
    blocked = Recommendation("xla", "m", "c", None, measurable=False)
    faster = Recommendation("steps_per_execution", "m", "c", None, measured_speedup=1.8,
                            same_training=True)
    assert rank([faster, blocked, warning]) == [warning, faster, blocked]
    assert "measurable" not in warning.to_json()
