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


def test_a_cache_is_recommended_only_within_the_builders_cache_share():
    # 1,000 elements of 1 MB after a costly map: 1 GB, which fits 60 % of a 2 GB budget
    # (tfopt.rules.cache_allowance, as the pipeline builder caches) but not of 1.5 GB
    from dataclasses import replace

    def sized(s, card, size):
        return replace(s, cardinality=card, bytes_per_element=size)

    stages = [sized(stage(0, "TFRecordDatasetV2", 1e-5), 1000, 1e3),
              sized(stage(1, "ParallelMapDatasetV2", 1e-2, parallelism=-1), 1000, 1e6),
              stage(2, "PrefetchDataset", 0.0)]

    def kinds(budget):
        return [r.kind for r in advice.recommendations(stages, 4, 100.0, None, ram_budget=budget)]

    assert "cache" in kinds(2 * 10**9)
    assert "cache" not in kinds(int(1.5 * 10**9))


def test_a_shuffle_buffer_is_judged_by_the_builders_rule():
    from dataclasses import replace

    source = replace(stage(0, "TFRecordDatasetV2", 1e-5), cardinality=50_000,
                     bytes_per_element=100.0)
    shuffle = replace(stage(1, "ShuffleDatasetV3", 1e-6), buffer_size=499)
    batch = replace(stage(2, "BatchDatasetV2", 0.0), batch_size=32)
    recs = [r for r in advice.recommendations([source, shuffle, batch], 2, 100.0, None)
            if r.kind == "shuffle_buffer"]
    assert len(recs) == 1 and "at least 500" in recs[0].message  # 1 % of 50,000
    shuffle = replace(shuffle, buffer_size=500)
    assert not [r for r in advice.recommendations([source, shuffle, batch], 2, 100.0, None)
                if r.kind == "shuffle_buffer"]
