"""The pipeline benchmark runs every method on real shards and reports coherent figures."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from click.testing import CliRunner
from conftest import make_demo_shards

import tfopt
from tfopt.analysis.report import PipelineReport, Stage
from tfopt.bench.pipeline import (
    STAGES,
    BenchSettings,
    _time_epochs,
    breakdown_rates,
    epoch_ends,
    run_pipeline_bench,
    slowest_stage,
    stage_breakdown,
)
from tfopt.cli import cli
from tfopt.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def demo_shards(tmp_path_factory):
    return make_demo_shards(tmp_path_factory.mktemp("bench"), count=160, classes=4,
                            min_size=48, max_size=64, shards=4)


def test_every_method_is_measured_alternately_with_ratios_and_stages(demo_shards):
    lines = []
    settings = BenchSettings(demo_shards, batch_size=16, image_size=32, epochs=2, repeats=2,
                             max_batches=3)
    report = run_pipeline_bench(settings, progress=lines.append)
    # keras-folder: image_dataset_from_directory on the folder the manifest says the shards
    # were converted from
    assert list(report.results) == ["naive", "guide", "keras-folder", "tfopt", "tfopt-device",
                                    "limit"]
    assert [line.split()[2] for line in lines[:6]] == list(report.results)  # alternation
    for result in report.results.values():
        assert len(result.epoch_rates) == 2 and all(len(r) == 2 for r in result.epoch_rates)
        assert all(rate > 0 for rates in result.epoch_rates for rate in rates)
        # the whole process's peak while the method ran: TensorFlow alone takes > 100 MiB
        assert 100 << 20 < result.peak_rss < report.ram_budget + (4 << 30)
    data = report.to_json()
    assert data["ratios"]["tfopt/guide"][0] == pytest.approx(
        report.results["tfopt"].median(0) / report.results["guide"].median(0))
    assert data["ratios"]["tfopt/keras-folder"][0] == pytest.approx(
        report.results["tfopt"].median(0) / report.results["keras-folder"].median(0))
    assert data["methods"]["tfopt"]["peak_rss_bytes"] == report.results["tfopt"].peak_rss
    assert data["ram_budget_bytes"] == report.ram_budget > 0
    # the breakdown is tfopt.analyze's: its stages, its bottleneck, its ceiling
    assert list(report.stages) == ["read", "parse", "decode", "batch", "prefetch"]
    assert report.slowest_stage == slowest_stage(report.analysis) != ""
    assert data["stages"] == report.stages and data["slowest_stage"] == report.slowest_stage
    assert data["stage_analysis"]["bottleneck"] == report.analysis.bottleneck
    assert data["stage_ceiling_per_s"] == pytest.approx(report.analysis.ceiling_per_s * 16)
    text = report.describe()
    assert "tfopt/guide" in text and "tfopt-device/guide" in text and "slowest" in text
    assert f"bottleneck {report.analysis.bottleneck}, ceiling" in text
    assert "tfopt/keras-folder" in text and "peak RSS" in text and "RAM budget" in text


def test_the_stage_breakdown_is_the_analysis_of_tfopts_pipeline_by_its_stage_names(demo_shards):
    settings = BenchSettings(demo_shards, batch_size=16, image_size=32, training=True)
    rates, report = stage_breakdown(settings, seconds=3.0)
    labels = [stage.label for stage in report.stages]
    # tfopt's ops carry name=: the analysis labels its stages by their job
    named = [label for label in labels if label in STAGES]
    assert named == ["read", "parse", "decode", "batch", "prefetch"], labels
    assert labels[:3] == ["files", "shuffle_files", "read"]
    assert "DecodeAndCropJpeg" in report.stage("decode").heavy_ops
    assert "ParseExampleV2" in report.stage("parse").heavy_ops
    # TensorFlow's model is matched to every stage from the read on (its enumerate, fused
    # shuffle-and-repeat, fused maps and map-and-batch included): at most the file list is not
    assert all("no model node" not in note or "read" not in note for note in report.notes)
    # the decode's elements are examples, the prefetch's batches of 16: examples/s up to each
    assert rates["decode"] == pytest.approx(report.stage("decode").prefix_rate)
    assert rates["prefetch"] == pytest.approx(report.rate_per_s * 16)
    # 4 shards of 40 records: a file for 40 records (from the lengths of a pass of each), read
    # in blocks counted against the manifest, then one record at a time again
    assert report.stage("files").elements_per_output == pytest.approx(
        report.stage("unblock_counted").elements_per_output / 40)
    # the read's rate is the pipeline cut after its shuffle and repeat, as it always was
    repeat = labels.index("repeat")
    assert labels[repeat - 5:repeat - 3] == ["read", "count"]
    assert labels[repeat - 3].startswith("map#")  # unbatch's own (TensorFlow's normalize_to_dense)
    assert labels[repeat - 2:repeat + 3] == ["unblock_counted", "shuffle", "repeat",
                                             "parse_block", "parse"]
    assert rates["read"] == pytest.approx(
        report.stages[repeat].prefix_rate * 16 / report.stages[repeat].elements_per_output)
    # the slowest stage is the one holding the analysis's bottleneck
    assert report.bottleneck in labels
    if report.bottleneck in STAGES:
        assert slowest_stage(report) == report.bottleneck
    assert slowest_stage(report) in (*rates, "files", "shuffle_files")


def _analysed(names, bottleneck, rates=None):
    """A hand-made analysis of stages with these names (None: unnamed)."""
    stages = tuple(Stage(index=i, op="MapDataset", name=name, parallelism=None,
                         runtime_parallelism=None, self_time_s=1e-4, per_core_rate=1e4,
                         prefix_rate=(rates or {}).get(name, 1000.0),
                         elements_per_output=8.0 if i < len(names) - 1 else 1.0,
                         bytes_per_element=None, random=False, python=False)
                   for i, name in enumerate(names))
    return PipelineReport(stages=stages, bottleneck=bottleneck, ceiling_per_s=10.0,
                          rate_per_s=100.0, predicted_per_s=10.0, cores=2,
                          recommendations=(), autotune_model=True)


@pytest.mark.parametrize(("bottleneck", "slowest"), [
    ("decode", "decode"), ("shuffle", "read"), ("parse_block", "parse"), ("map#4", "parse"),
    ("files", "files"), (None, "")])
def test_the_slowest_stage_is_the_breakdown_stage_holding_the_bottleneck(bottleneck, slowest):
    names = ["files", "read", "shuffle", "parse_block", None, "parse", "decode", "batch",
             "prefetch"]
    assert slowest_stage(_analysed(names, bottleneck)) == slowest


def test_breakdown_rates_count_examples_and_end_each_stage_at_its_last_op():
    names = ["files", "read", "shuffle", "parse_block", "parse", "decode", "batch", "prefetch"]
    report = _analysed(names, "decode", {"shuffle": 800.0, "batch": 5.0, "prefetch": 6.0})
    # elements_per_output 8 below the output, 1 at it; batches of 8 examples
    rates = breakdown_rates(report, 8)
    assert rates == {"read": 800.0, "parse": 1000.0, "decode": 1000.0, "batch": 5.0,
                     "prefetch": 48.0}


def test_keras_folder_needs_an_image_folder(tmp_path):
    shards = make_demo_shards(tmp_path, count=24, classes=3, min_size=40, max_size=48, shards=2)
    settings = BenchSettings(shards, batch_size=8, image_size=16, repeats=1, max_batches=1)
    (tmp_path / "images").rename(tmp_path / "moved")
    report = run_pipeline_bench(settings, methods=None)
    assert "keras-folder" not in report.results
    assert any("keras-folder left out" in note for note in report.notes)
    with pytest.raises(InvalidArgumentError, match="keras-folder.*images="):
        run_pipeline_bench(settings, methods=["keras-folder", "tfopt"])
    moved = BenchSettings(shards, batch_size=8, image_size=16, repeats=1, max_batches=1,
                          images=tmp_path / "moved")
    report = run_pipeline_bench(moved, methods=["keras-folder", "tfopt"])
    assert list(report.results) == ["keras-folder", "tfopt"]
    assert not any("keras-folder" in note for note in report.notes)


def test_an_epoch_ends_at_the_batch_that_completes_its_share_of_examples():
    # batched before repeat: each pass ends with a short batch, worth only what it holds
    assert epoch_ends([4, 4, 2] * 3, examples=10, epochs=3) == [2, 5, 8]
    # repeated before batch (tfopt): a batch carries the next pass's first examples, and the
    # running total keeps the ends from drifting a batch later every epoch
    assert epoch_ends([4] * 8, examples=10, epochs=3) == [2, 4, 7]
    # a batch larger than an epoch ends several (the benchmark refuses such a batch size)
    assert epoch_ends([10, 10], examples=4, epochs=4) == [0, 0, 1, 1]
    with pytest.raises(InvalidArgumentError, match="after 1 epoch"):
        epoch_ends([4, 4, 2], examples=10, epochs=2)


def test_timed_epochs_read_what_the_epochs_hold_and_no_more():
    two_passes = tf.data.Dataset.range(10).batch(4).repeat(2)  # 6 batches: 4, 4, 2, 4, 4, 2
    rates = _time_epochs(two_passes, examples=10, epochs=2)
    assert len(rates) == 2 and all(rate > 0 for rate in rates)
    with pytest.raises(InvalidArgumentError, match="ended after 2 epoch"):
        _time_epochs(two_passes, examples=10, epochs=3)
    with pytest.raises(StopIteration):  # fill: read on to 7 batches in all, of 6
        _time_epochs(two_passes, examples=10, epochs=2, fill=7)


def test_an_epoch_is_the_whole_pass_when_the_batch_does_not_divide_it(demo_shards):
    settings = BenchSettings(demo_shards, batch_size=12, image_size=16, training=True,
                             split="train", repeats=1, epochs=2)
    report = run_pipeline_bench(settings, methods=["guide", "tfopt"])
    records = tfopt.PipelineBuilder(demo_shards, batch_size=12, split="train",
                                    image_size=16).source.num_records
    assert records % 12 and report.examples_per_epoch == records
    assert f"{records} examples per epoch" in report.describe()
    assert report.notes == ()  # the cache, filled by the first pass, served the second
    with pytest.raises(InvalidArgumentError, match=f"batch_size=400 .* the {records} examples"):
        run_pipeline_bench(dataclasses.replace(settings, batch_size=400), methods=["tfopt"])


def test_eval_settings_and_the_cli_json(demo_shards):
    # no validation split: evaluating the training split is asked for, never a silent fallback
    options = ["--eval", "--batch-size", "16", "--image-size", "32", "--repeats", "1",
               "--max-batches", "2", "--methods", "guide,tfopt", "--json", "-q"]
    refused = CliRunner().invoke(cli, ["bench", "pipeline", str(demo_shards), *options])
    assert refused.exit_code == 1 and "has no 'validation' split" in refused.output
    assert "--split train" in refused.output
    result = CliRunner().invoke(cli, ["bench", "pipeline", str(demo_shards), *options,
                                      "--split", "train"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert list(data["methods"]) == ["guide", "tfopt"]
    assert data["settings"]["training"] is False
    bad = CliRunner().invoke(cli, ["bench", "pipeline", str(demo_shards), "--methods", "guide"])
    assert bad.exit_code == 1 and "tfopt included" in bad.output


@pytest.mark.parametrize("field", [{"max_batches": 0}, {"max_batches": -3}, {"epochs": 0},
                                   {"repeats": 0}])
def test_bench_settings_refuse_counts_below_one(field):
    with pytest.raises(InvalidArgumentError, match=next(iter(field))):
        BenchSettings("unused", **field)


# TensorFlow's C++ warning when an iterator goes before its cache is complete (docs/data.md)
PARTIAL_CACHE = "did not fully read the dataset being cached"
PARTIAL_READ_SCRIPT = r"""
import gc, json, os, sys, time
from tfopt.bench.pipeline import BenchSettings, run_pipeline_bench
from tfopt.data.pipeline import PipelineBuilder

shards = sys.argv[1]

def mark(text):  # on fd 2 beside TensorFlow's C++ log, in order
    gc.collect()
    time.sleep(0.5)  # the iterator's C++ side may log from one of its threads
    os.write(2, f"@@ {text}\n".encode())

mark(f"TF_CPP_MIN_LOG_LEVEL={os.environ.get('TF_CPP_MIN_LOG_LEVEL')}")
# a partial read of the same cached pipeline by hand: the warning shows in this process
for _ in PipelineBuilder(shards, batch_size=12, image_size=16, split="train").build().take(1):
    pass
mark("control")
notes = {}
for name, extra in (("capped", {"max_batches": 2}), ("one pass", {}), ("whole", {"epochs": 2})):
    settings = BenchSettings(shards, batch_size=12, image_size=16, training=False,
                             split="train", repeats=1, **extra)
    notes[name] = run_pipeline_bench(settings, methods=["tfopt"]).notes
    mark(name)
print(json.dumps(notes))
"""


def _partial_cache_warned_before_each_mark(stderr: str) -> dict[str, bool]:
    """Mark -> whether TensorFlow's partial-cache warning came on fd 2 since the mark before."""
    logged, since = {}, []
    for line in stderr.splitlines():
        if line.startswith("@@ "):
            logged[line[3:]] = any(PARTIAL_CACHE in seen for seen in since)
            since = []
        else:
            since.append(line)
    return logged


def test_the_benchmark_never_reads_a_cache_in_part(demo_shards):
    # a program that imports tfopt keeps TensorFlow's own log level (this test process may
    # have set TF_CPP_MIN_LOG_LEVEL=2 by importing TensorFlow the quiet way)
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", PARTIAL_READ_SCRIPT, str(demo_shards)],
                            capture_output=True, text=True, env=env, timeout=300)
    # TensorFlow's warning is visible in this process: the read by hand logs it; the
    # benchmark's runs do not (2 batches of 12 of the 160 records, or one pass: no cache; two
    # passes: read on, untimed, to one batch past the first, which completes the cache)
    logged = _partial_cache_warned_before_each_mark(result.stderr)
    assert logged == {"TF_CPP_MIN_LOG_LEVEL=None": False, "control": True, "capped": False,
                      "one pass": False, "whole": False}, result.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    notes = json.loads(result.stdout.strip().splitlines()[-1])
    (note,) = notes["capped"]
    assert note.startswith("tfopt's cache is off in these runs: --max-batches 2 x 1 epoch(s) "
                           "read 24 of the 160 examples of one pass")
    (note,) = notes["one pass"]
    assert note.startswith("tfopt's cache is off in these runs: 1 epoch(s) read one pass of "
                           "the 160 examples, and a cache serves only the passes after the one "
                           "that fills it")
    assert notes["whole"] == []


def test_a_cache_asked_for_is_measured_filling_and_the_report_says_so(demo_shards):
    settings = BenchSettings(demo_shards, batch_size=16, image_size=16, training=False,
                             split="train", repeats=1, max_batches=2, cache=True)
    report = run_pipeline_bench(settings, methods=["tfopt"])
    (note,) = report.notes
    assert note.startswith("every epoch measured fills tfopt's cache")
    assert "final (memory)" in report.choices and report.to_json()["notes"] == [note]
    assert f"note: {note}" in report.describe()
