"""The pipeline benchmark runs every method on real shards and reports coherent figures."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import make_demo_shards

import tfopt
from tfopt.bench.pipeline import STAGES, BenchSettings, run_pipeline_bench
from tfopt.cli import cli


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
    assert set(report.stages) == set(STAGES) and report.slowest_stage in STAGES
    text = report.describe()
    assert "tfopt/guide" in text and "tfopt-device/guide" in text and "slowest" in text
    assert "tfopt/keras-folder" in text and "peak RSS" in text and "RAM budget" in text


def test_keras_folder_needs_an_image_folder(tmp_path):
    shards = make_demo_shards(tmp_path, count=24, classes=3, min_size=40, max_size=48, shards=2)
    settings = BenchSettings(shards, batch_size=8, image_size=16, repeats=1, max_batches=1)
    (tmp_path / "images").rename(tmp_path / "moved")
    report = run_pipeline_bench(settings, methods=None)
    assert "keras-folder" not in report.results
    assert any("keras-folder left out" in note for note in report.notes)
    with pytest.raises(tfopt.InvalidArgumentError, match="keras-folder.*images="):
        run_pipeline_bench(settings, methods=["keras-folder", "tfopt"])
    moved = BenchSettings(shards, batch_size=8, image_size=16, repeats=1, max_batches=1,
                          images=tmp_path / "moved")
    report = run_pipeline_bench(moved, methods=["keras-folder", "tfopt"])
    assert list(report.results) == ["keras-folder", "tfopt"] and not report.notes


def test_eval_settings_and_the_cli_json(demo_shards):
    result = CliRunner().invoke(cli, ["bench", "pipeline", str(demo_shards), "--eval",
                                      "--batch-size", "16", "--image-size", "32", "--repeats",
                                      "1", "--max-batches", "2", "--methods", "guide,tfopt",
                                      "--json", "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert list(data["methods"]) == ["guide", "tfopt"]
    assert data["settings"]["training"] is False
    bad = CliRunner().invoke(cli, ["bench", "pipeline", str(demo_shards), "--methods", "guide"])
    assert bad.exit_code == 1 and "tfopt included" in bad.output


@pytest.mark.parametrize("field", [{"max_batches": 0}, {"max_batches": -3}, {"epochs": 0},
                                   {"repeats": 0}])
def test_bench_settings_refuse_counts_below_one(field):
    with pytest.raises(tfopt.InvalidArgumentError, match=next(iter(field))):
        BenchSettings("unused", **field)
