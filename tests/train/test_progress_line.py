"""ProgressLine in real fits: the printed line holds Keras's metrics, examples/s and the
input-bound share; History, CSVLogger and tfopt.Run's history.csv keep every measurement."""

from __future__ import annotations

import csv
import math
import re

import numpy as np
import pytest

keras = pytest.importorskip("keras")
from tfopt.train.callbacks import (  # noqa: E402
    MEASUREMENT_KEYS,
    PROGRESS_LINE_KEYS,
    InputProbe,
    ProgressLine,
    is_measurement,
    training_callbacks,
)
from tfopt.train.timing import StallMeter, StepTimer  # noqa: E402

FEATURES = 8
HIDDEN = MEASUREMENT_KEYS - set(PROGRESS_LINE_KEYS)


def datasets(tf):
    rng = np.random.default_rng(0)
    x = rng.random((128, FEATURES), dtype=np.float32)
    y = rng.random((128, 1), dtype=np.float32)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    return train, tf.data.Dataset.from_tensor_slices((x[:32], y[:32])).batch(16)


def model():
    keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(4, activation="relu"),
                          keras.layers.Dense(1)])
    m.compile("sgd", "mse", metrics=["mae"])
    return m


def epoch_lines(out: str) -> list[dict[str, str]]:
    """The keys and values of each epoch line ``verbose=2`` printed."""
    lines = [line for line in out.splitlines() if re.match(r"\s*\d+/\d+ - ", line)]
    return [dict(re.findall(r" - (\w+): (\S+)", line)) for line in lines]


def fit(tf, callbacks, verbose=2, epochs=2):
    train, validation = datasets(tf)
    probe = InputProbe()
    return model().fit(probe.instrument(train), validation_data=validation, epochs=epochs,
                       verbose=verbose, shuffle=False,
                       callbacks=[*training_callbacks(16, probe, gpu=False, warmup_steps=2),
                                  *callbacks])


def test_the_line_holds_kerass_metrics_and_two_measurements_history_and_csv_all(tf, tmp_path,
                                                                                capsys):
    log_file = tmp_path / "log.csv"
    history = fit(tf, [keras.callbacks.CSVLogger(str(log_file)), ProgressLine()])
    lines = epoch_lines(capsys.readouterr().out)
    assert len(lines) == 2  # one line an epoch: Keras added no progress bar of its own
    for line in lines:
        assert {"loss", "mae", "val_loss", "val_mae", *PROGRESS_LINE_KEYS} <= set(line), line
        assert not set(line) & HIDDEN, line
        assert 0 <= float(line["input_bound_percent"]) <= 100
    # the line leaves logs whole: History and the CSV get every measurement
    assert MEASUREMENT_KEYS <= set(history.history)
    assert all(math.isfinite(v) for v in history.history["step_time_p90"])
    rows = list(csv.DictReader(log_file.open()))
    assert len(rows) == 2 and MEASUREMENT_KEYS <= set(rows[0])
    assert float(rows[1]["compute_seconds"]) > 0


def test_without_it_kerass_line_prints_every_measurement(tf, capsys):
    fit(tf, [], epochs=1)
    (line,) = epoch_lines(capsys.readouterr().out)
    assert MEASUREMENT_KEYS <= set(line)


def test_show_picks_the_measurements_printed_and_verbose_0_prints_none(tf, capsys):
    fit(tf, [ProgressLine(show="step_time_p90")], epochs=1)
    (line,) = epoch_lines(capsys.readouterr().out)
    assert {key for key in line if is_measurement(key)} == {"step_time_p90"}
    assert "loss" in line and "val_mae" in line
    history = fit(tf, [ProgressLine()], verbose=0, epochs=1)
    assert epoch_lines(capsys.readouterr().out) == []
    assert MEASUREMENT_KEYS <= set(history.history)


def test_every_key_the_measuring_callbacks_write_is_a_measurement():
    timer, meter = StepTimer(warmup_steps=0), StallMeter(warmup_steps=0)
    keys = {*timer.summary().to_logs(), *meter.summary().to_logs(), "epoch_start_seconds",
            "gpu0_util_mean", "gpu1_power_percent_max", "gpu12_memory_mib_max"}
    assert all(map(is_measurement, keys)) and keys - MEASUREMENT_KEYS == {
        "gpu0_util_mean", "gpu1_power_percent_max", "gpu12_memory_mib_max"}
    for key in ("loss", "val_loss", "accuracy", "learning_rate", "gpu_loss", "val_gpu0_util"):
        assert not is_measurement(key), key


# -- tfopt.Run: Run.callbacks() ends with ProgressLine after its CSVLogger -----------------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from tests.conftest import make_demo_shards

    return make_demo_shards(tmp_path_factory.mktemp("line_data"), count=120, classes=3,
                            min_size=32, max_size=40, val_fraction=0.2, shards=2)


def test_a_runs_line_is_short_and_its_history_csv_keeps_every_measurement(shards, tmp_path,
                                                                           capsys):
    from tfopt.models import build_model
    from tfopt.run import Run

    run = Run(shards, image_size=32, batch_size=16, workdir=tmp_path / "run", seed=0,
              steps_per_execution=1)
    assert isinstance(run.callbacks()[-1], ProgressLine)
    with run.scope():
        m = build_model("cnn", image_size=32, classes=run.num_classes, size="tiny")
    run.compile(m, "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
    history = run.fit(m, epochs=2, verbose=2)
    lines = epoch_lines(capsys.readouterr().out)
    assert len(lines) == 2
    for line in lines:
        assert {"loss", "accuracy", "val_loss", *PROGRESS_LINE_KEYS} <= set(line), line
        assert not set(line) & HIDDEN, line
    rows = list(csv.DictReader((tmp_path / "run" / "history.csv").open()))
    assert len(rows) == 2 and MEASUREMENT_KEYS <= set(rows[0])
    assert MEASUREMENT_KEYS <= set(history.history)
