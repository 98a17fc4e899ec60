"""The training benchmark trains both methods alternately and reports coherent figures."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ElementTree

import pytest
from click.testing import CliRunner
from conftest import make_demo_shards

from tfopt.cli import cli
from tfopt.errors import InvalidArgumentError

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return make_demo_shards(tmp_path_factory.mktemp("train-bench"), count=64, classes=4,
                            min_size=48, max_size=64, shards=2, val_fraction=0.25)


def test_both_methods_alternate_with_rates_ratios_and_accuracies(shards, float32_policy):
    import keras

    from tfopt.bench.train import METHODS, TrainBenchSettings, run_train_bench

    lines = []
    settings = TrainBenchSettings(shards, model="mlp", image_size=32, batch_size=8, epochs=2,
                                  repeats=2, steps_per_execution=2, policy="mixed_bfloat16")
    report = run_train_bench(settings, progress=lines.append)

    assert list(report.results) == list(METHODS)
    runs = [line.split()[2] for line in lines if line.startswith("run ")]
    assert runs == ["baseline", "tfopt", "baseline", "tfopt"]  # alternating
    for result in report.results.values():
        assert len(result.runs) == 2
        for run in result.runs:
            assert len(run.epoch_rates) == 2 and all(rate > 0 for rate in run.epoch_rates)
            assert all(examples > 0 for examples in run.epoch_examples)
            assert len(run.input_bound_percent) == 2
            assert 0.0 <= run.val_accuracy <= 1.0
            # model FLOPs utilisation: a share of this CPU's peak, from its own flags
            assert len(run.mfu) == 2 and all(0 < value < 1 for value in run.mfu)
        assert result.median() > 0 and result.median("first_epoch_rate") > 0
    assert report.results["baseline"].policy == "float32"
    assert report.results["baseline"].steps_per_execution == 1
    assert report.results["tfopt"].policy == "mixed_bfloat16"
    assert report.results["tfopt"].steps_per_execution == 2
    assert report.eval_split == "validation"
    assert report.peak is not None and "MFU after epoch 1: baseline" in report.describe()
    assert report.to_json()["peak"]["per_second"]["float32"] == report.peak.for_dtype("float32")
    assert report.tfopt_cached and report.notes == ()  # whole epochs: the cache serves epoch 2

    data = json.loads(json.dumps(report.to_json()))
    for what in ("steady_rate", "first_epoch_rate", "overall_rate"):
        expected = (report.results["tfopt"].median(what)
                    / report.results["baseline"].median(what))
        assert data["ratios"][what] == pytest.approx(expected)
        assert data["methods"]["tfopt"][what]["median"] == pytest.approx(
            report.results["tfopt"].median(what))
    assert not math.isnan(data["methods"]["baseline"]["val_accuracy"]["median"])
    assert data["methods"]["baseline"]["batch_norm"] == "Keras"
    assert data["methods"]["tfopt"]["batch_norm"].startswith("fused")
    text = report.describe()
    assert "tfopt/baseline" in text and "validation accuracy" in text

    # the bench set mixed_bfloat16 for tfopt's models only: the global policy is back
    assert keras.mixed_precision.global_policy().name == "float32"


def test_the_policy_is_restored_to_what_it_was(shards, float32_policy):
    import keras

    from tfopt.bench.train import TrainBenchSettings, run_train_bench

    keras.mixed_precision.set_global_policy("mixed_float16")
    settings = TrainBenchSettings(shards, model="mlp", image_size=32, batch_size=16, epochs=1,
                                  repeats=1, steps_per_execution=1, policy="mixed_bfloat16",
                                  max_steps=2)
    report = run_train_bench(settings)
    assert keras.mixed_precision.global_policy().name == "mixed_float16"
    # max_steps caps both methods' epochs
    assert all(run.epoch_examples[0] <= 32 for result in report.results.values()
               for run in result.runs)


def test_a_short_run_skips_the_trial_and_says_what_one_epoch_measures(shards, float32_policy):
    from tfopt.bench.train import SPE_TRIAL_COST_STEPS, TrainBenchSettings, run_train_bench

    lines = []
    settings = TrainBenchSettings(shards, model="mlp", image_size=32, batch_size=8, epochs=1,
                                  repeats=1, policy="float32", max_steps=3)
    report = run_train_bench(settings, progress=lines.append)
    # 3 steps in all against a trial of 165: not worth it
    assert report.spe_trial == {} and report.results["tfopt"].steps_per_execution == 1
    assert any(f"fewer than the trial's {SPE_TRIAL_COST_STEPS}" in line for line in lines)
    text = report.describe()
    assert "after epoch 1" not in text
    # 3 steps of 8 read 24 of the 48 training records: a cache would never be read from,
    # so tfopt's pipeline goes without, and the report says so
    assert "in the one epoch (compile included" in text
    (note,) = report.notes
    assert note.startswith("tfopt's pipeline runs without its cache: --max-steps 3 x 1 epoch(s) "
                           "at batch 8 read 24 of the 48 training examples of one pass")
    assert f"note: {note}" in text and report.to_json()["notes"] == [note]
    assert not report.tfopt_cached and "cache none" in report.results["tfopt"].pipeline


def test_settings_are_validated():
    from tfopt.bench.train import TrainBenchSettings

    with pytest.raises(InvalidArgumentError, match="epochs=0"):
        TrainBenchSettings("x", epochs=0)
    with pytest.raises(InvalidArgumentError, match="model='vit'"):
        TrainBenchSettings("x", model="vit")
    with pytest.raises(InvalidArgumentError, match="batch_sizes"):
        TrainBenchSettings("x", batch_sizes=(32, -1))
    assert TrainBenchSettings("x").replace(epochs=3).epochs == 3


def test_cli_json_with_sweep_and_plot(shards, tmp_path, float32_policy):
    plot = tmp_path / "sweep.svg"
    result = CliRunner().invoke(cli, [
        "bench", "train", str(shards), "--model", "mlp", "--image-size", "32",
        "--batch-size", "16", "--epochs", "1", "--repeats", "1", "--steps-per-execution", "1",
        "--batch-sizes", "8,16", "--plot", str(plot), "--json", "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert list(data["methods"]) == ["baseline", "tfopt"]
    assert set(data["sweep"]) == {"8", "16"} and all(v > 0 for v in data["sweep"].values())
    assert data["settings"]["batch_sizes"] == [8, 16]
    assert len(ElementTree.parse(plot).getroot().findall(f"{SVG}circle")) == 2

    bad = CliRunner().invoke(cli, ["bench", "train", str(shards), "--batch-sizes", "32,x"])
    assert bad.exit_code == 2 and "32,64,128" in bad.output


def test_an_epoch_without_measured_steps_reads_n_a_not_nan():
    import math

    from tfopt.bench.train import _percent

    assert _percent(math.nan) == "n/a"
    assert _percent(12.345) == "12.3 %" and _percent(3.4, 0) == "3 %"
