"""The allocation model on hand-made stages (no TensorFlow)."""

from __future__ import annotations

import pytest

from tfopt.analysis import advice
from tfopt.analysis.report import Stage


def stage(index, op, self_time, parallelism=None, runtime=None, python=False):
    return Stage(index=index, op=op, name=None, parallelism=parallelism,
                 runtime_parallelism=runtime, self_time_s=self_time, per_core_rate=None,
                 prefix_rate=None, elements_per_output=1.0, bytes_per_element=None,
                 random=False, python=python)


def test_plumbers_closed_form():
    stages = [stage(0, "RangeDataset", 0.001), stage(1, "MapDataset", 0.01),
              stage(2, "PrefetchDataset", 0.0)]
    plan = advice.allocation(stages, cores=4)
    # min(4 / 0.011, 1 / 0.001): the map parallelises, the source does not
    assert plan.ceiling_per_s == pytest.approx(4 / 0.011)
    assert plan.predicted_per_s == pytest.approx(100)  # the sequential map, as written
    assert plan.bottleneck == "map#1"
    (rec,) = [r for r in advice.recommendations(stages, 4, 100.0, None)
              if r.kind == "parallelize"]
    assert rec.expected_speedup == pytest.approx((4 / 0.011) / 100)


def test_a_sequential_source_bounds_the_ceiling_and_gets_no_parallelize():
    stages = [stage(0, "TFRecordDataset", 0.01), stage(1, "MapDataset", 0.001)]
    plan = advice.allocation(stages, cores=8)
    assert plan.ceiling_per_s == pytest.approx(100)
    assert plan.bottleneck == "TFRecord#0"
    assert "parallelize" not in [r.kind for r in advice.recommendations(stages, 8, 99, None)]


def test_a_python_stage_counts_as_sequential():
    stages = [stage(0, "RangeDataset", 0.0001),
              stage(1, "ParallelMapDatasetV2", 0.01, parallelism=-1, runtime=4, python=True)]
    assert advice.allocation(stages, cores=4).ceiling_per_s == pytest.approx(100)


def test_near_the_ceiling_no_parallelize():
    stages = [stage(0, "RangeDataset", 0.0001), stage(1, "MapDataset", 0.01)]
    assert "parallelize" in [r.kind for r in advice.recommendations(stages, 2, 100, None)]
    # measured already at 90% of the ceiling (the model's self times were inflated)
    assert "parallelize" not in [r.kind for r in advice.recommendations(stages, 2, 180, None)]


def test_prefetch_is_worth_2x_only_where_nothing_runs_the_output_ahead():
    stages = [stage(0, "RangeDataset", 0.0001), stage(1, "MapDataset", 0.001),
              stage(2, "BatchDataset", 0.0001)]

    def prefetch(runs_ahead):
        (rec,) = [r for r in advice.recommendations(stages, 2, 900, runs_ahead)
                  if r.kind == "prefetch"]
        return rec

    assert prefetch(None).expected_speedup == 2.0
    assert "take turns" in prefetch(None).message
    # TensorFlow fused the map and the batch into MapAndBatch, which runs ahead in a thread
    fused = prefetch("MapAndBatch")
    assert fused.expected_speedup == 1.0 and "MapAndBatch" in fused.message
    assert "take turns" not in fused.message
    assert "inject_prefetch" in prefetch("Prefetch").message
    # nothing to recommend once the pipeline ends in one
    with_prefetch = [*stages, stage(3, "PrefetchDataset", 0.0)]
    assert "prefetch" not in [r.kind for r in advice.recommendations(with_prefetch, 2, 900, None)]
