"""Shards another tool wrote (Model Garden's keys, no manifest): written by the benchmarks'
helper, read by the pipeline as a foreign folder, and benchmarked from the folder itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner

import tfopt
from tfopt.bench.demo import FOREIGN_KEYS, write_foreign_shards
from tfopt.bench.pipeline import BenchSettings, run_pipeline_bench
from tfopt.cli import cli
from tfopt.data.pipeline import PipelineBuilder
from tfopt.errors import InvalidArgumentError, OutputExistsError
from tfopt.records.manifest import MANIFEST_NAME


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("foreign")
    tfopt.make_demo_data(root / "images", count=48, classes=3, min_size=40, max_size=64,
                         workers=1)
    return root / "images"


@pytest.fixture(scope="module")
def garden(images):
    dst = images.parent / "garden"
    write_foreign_shards(images, dst, side=48, shards=3)
    return dst


def test_foreign_shards_hold_every_image_at_the_side_under_model_gardens_keys(images, garden):
    names = sorted(path.name for path in garden.iterdir())
    assert names == [f"train-{i:05d}-of-00003" for i in range(3)]
    assert not (garden / MANIFEST_NAME).exists()
    assert not garden.with_name("garden.partial").exists()
    labels, sides = [], []
    for path in sorted(garden.iterdir()):
        for record in tf.data.TFRecordDataset(str(path)):
            example = tf.train.Example.FromString(record.numpy())
            feature = example.features.feature
            assert sorted(feature) == sorted(FOREIGN_KEYS)
            image = tf.io.decode_jpeg(feature["image/encoded"].bytes_list.value[0])
            height, width = int(image.shape[0]), int(image.shape[1])
            assert (feature["image/height"].int64_list.value[0],
                    feature["image/width"].int64_list.value[0]) == (height, width)
            sides.append(max(height, width))
            labels.append(feature["image/class/label"].int64_list.value[0])
    assert len(labels) == len(list(images.glob("*/*.jpg"))) == 48
    assert set(sides) == {48}
    # classes numbered in name order, every one present, shuffled across the shards
    assert np.bincount(labels).tolist() == [16, 16, 16]
    assert labels != sorted(labels)


def test_the_pipeline_reads_the_foreign_folder_by_its_keys(garden):
    builder = PipelineBuilder(garden, batch_size=8, image_size=32, training=False,
                              split="train")
    assert builder.source.image_key == "image/encoded"
    assert builder.source.label_key == "image/class/label"
    assert builder.source.num_records == 48 and builder.source.counts_walked  # no manifest
    batches = list(builder.build())
    assert sum(int(images.shape[0]) for images, _ in batches) == 48
    assert batches[0][0].shape[1:] == (32, 32, 3)


def test_the_pipeline_bench_takes_the_foreign_folder_without_a_glob(garden):
    settings = BenchSettings(garden, batch_size=8, image_size=32, training=False,
                             split="train", repeats=1, stages=False)
    report = run_pipeline_bench(settings, ["guide", "tfopt"])
    assert report.examples_per_epoch == 48  # counted in the files: no manifest says it
    assert set(report.results) == {"guide", "tfopt"}
    assert all(rate > 0 for result in report.results.values()
               for rates in result.epoch_rates for rate in rates)
    # stages=False: no breakdown, and the report says none
    assert report.analysis is None and report.stages == {} and report.slowest_stage == ""
    assert "tfopt stages" not in report.describe()
    result = CliRunner().invoke(cli, ["bench", "pipeline", str(garden), "--eval", "--split",
                                      "train", "--batch-size", "8", "--image-size", "32",
                                      "--repeats", "1", "--methods", "guide,tfopt", "--json",
                                      "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["examples_per_epoch"] == 48 and data["settings"]["source"] == str(garden)
    assert data["stage_analysis"] is not None  # the CLI keeps the breakdown


def test_foreign_shards_refuse_an_existing_folder_and_a_folder_without_jpegs(images, garden,
                                                                            tmp_path):
    with pytest.raises(OutputExistsError, match="garden: exists"):
        write_foreign_shards(images, garden)
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    with pytest.raises(InvalidArgumentError, match="images=.*empty.*found none"):
        write_foreign_shards(tmp_path / "empty", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(InvalidArgumentError, match="side"):
        write_foreign_shards(images, tmp_path / "out", side=0)


def test_bench_settings_stages_is_a_flag():
    with pytest.raises(InvalidArgumentError, match="stages"):
        BenchSettings("unused", stages="no")


def test_the_held_out_script_prints_each_bar_and_writes_its_figures(tmp_path):
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_held_out.py"
    done = subprocess.run([sys.executable, str(script), "--work", str(tmp_path), "--count", "80",
                           "--repeats", "1", "--sets", "eval-uncached,training,one-epoch"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    bars = ("eval, cache off", "one epoch", "epoch 1 of 3 (filling)", "cached (epochs 2-3)")
    for bar in bars:
        assert bar in done.stdout
    assert "eval, cache filling" not in done.stdout  # its set was not asked for
    # the one-epoch set is tfopt's choice for one pass: no cache, and the report says why
    assert "tfopt's cache is off in these runs: 1 epoch(s) read one pass" in done.stdout
    figures = json.loads((tmp_path / "held_out.json").read_text())
    assert {bar["bar"] for bar in figures["bars"]} == set(bars)
    assert figures["sets"]["one-epoch"]["notes"][0].startswith("tfopt's cache is off")
    assert all(bar["ratio"] > 0 for bar in figures["bars"])
    assert not (tmp_path / "garden" / MANIFEST_NAME).exists()
    # a set that does not exist is refused by name
    bad = subprocess.run([sys.executable, str(script), "--work", str(tmp_path), "--count", "80",
                          "--sets", "eval,nonsense"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "nonsense" in bad.stderr
