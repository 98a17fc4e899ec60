"""The callbacks in real ``fit`` runs: logs keys, steps_per_execution, input stall, GPU stats."""

from __future__ import annotations

import csv
import json
import logging
import math
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tfopt.gpu.testing import FakeGpu, make_fake_nvml
from tfopt.train.timing import InputBound

keras = pytest.importorskip("keras")
from tfopt.train.callbacks import (  # noqa: E402
    GpuStatsCallback,
    InputProbe,
    InputStallCallback,
    ThroughputCallback,
    training_callbacks,
)

FEATURES = 16


def arrays(n=256, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.random((n, FEATURES), dtype=np.float32),
            rng.random((n, 1), dtype=np.float32))


def dataset(tf, n=256, batch=32):
    return tf.data.Dataset.from_tensor_slices(arrays(n)).batch(batch)


def model(units=8, steps_per_execution=1):
    keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(units, activation="relu"),
                          keras.layers.Dense(units, activation="relu"), keras.layers.Dense(1)])
    m.compile("sgd", "mse", steps_per_execution=steps_per_execution)
    return m


def test_throughput_and_stall_keys_reach_history_and_csv_logger(tf, tmp_path):
    probe = InputProbe()
    log_file = tmp_path / "log.csv"
    callbacks = [*training_callbacks(batch_size=32, probe=probe, gpu=False, warmup_steps=2),
                 keras.callbacks.CSVLogger(str(log_file))]
    history = model().fit(probe.instrument(dataset(tf)), epochs=2, verbose=0,
                          callbacks=callbacks)
    keys = ("examples_per_second", "steps_per_second", "step_time_median", "step_time_p90",
            "input_bound_percent", "input_wait_seconds", "compute_seconds", "step_gap_seconds")
    for key in keys:
        values = history.history[key]
        assert len(values) == 2 and all(math.isfinite(v) and v >= 0 for v in values), key
    # examples/s is steps/s times the given global batch
    assert history.history["examples_per_second"][1] == pytest.approx(
        32 * history.history["steps_per_second"][1])
    assert history.history["step_time_p90"][1] >= history.history["step_time_median"][1] > 0
    rows = list(csv.DictReader(log_file.open()))
    assert len(rows) == 2 and float(rows[1]["examples_per_second"]) > 0
    assert 0 <= float(rows[1]["input_bound_percent"]) <= 100


@pytest.mark.parametrize("steps_per_execution", [1, 4])
def test_steps_per_execution_counts_every_step(tf, steps_per_execution):
    throughput = ThroughputCallback(probe=None, batch_size=32, warmup_steps=0)
    stall = InputStallCallback(warmup_steps=0)
    calls = []
    spy = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: calls.append(batch))
    model(steps_per_execution=steps_per_execution).fit(
        dataset(tf, n=512), epochs=1, verbose=0, callbacks=[throughput, stall, spy])
    # Keras calls the hook once per execution but 16 steps ran
    assert len(calls) == 16 // steps_per_execution
    assert throughput.timer.summary().steps == 16
    assert throughput.timer.summary().examples == 16  # the callback passes 1, scaled at epoch end
    assert stall.meter.steps_run == 16


def test_batch_size_inferred_from_probe_counts_partial_batches(tf):
    probe = InputProbe()
    throughput = ThroughputCallback(probe=probe, warmup_steps=0)
    history = model().fit(probe.instrument(dataset(tf, n=200, batch=64)), epochs=1, verbose=0,
                          callbacks=[throughput])
    assert probe.read()[1:] == (200, 4)  # 64, 64, 64 and a last batch of 8
    assert history.history["examples_per_second"][0] == pytest.approx(
        50 * history.history["steps_per_second"][0])


def test_probe_keeps_elements_and_cardinality(tf):
    plain = dataset(tf, n=100, batch=30)
    probe = InputProbe()
    probed = probe.instrument(plain)
    assert probed.element_spec == plain.element_spec
    assert probed.cardinality().numpy() == 4
    for (xa, ya), (xb, yb) in zip(plain, probed, strict=True):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    dict_probe = InputProbe()
    dicts = dict_probe.instrument(tf.data.Dataset.from_tensor_slices({"a": np.arange(10)}).batch(4))
    assert [d["a"].numpy().tolist() for d in dicts][-1] == [8, 9]
    assert dict_probe.read()[1:] == (10, 3)


def test_unknown_batch_size_warns_once_and_logs_nan(tf, caplog):
    throughput = ThroughputCallback(warmup_steps=0)
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        history = model().fit(dataset(tf), epochs=2, verbose=0, callbacks=[throughput])
    assert all(math.isnan(v) for v in history.history["examples_per_second"])
    assert all(v > 0 for v in history.history["steps_per_second"])
    assert sum("batch size unknown" in r.message for r in caplog.records) == 1


def slow_dataset(tf, n=256, batch=32, sleep_s=0.02):
    def slow(x):
        time.sleep(sleep_s)  # a decode that takes 20 ms a batch
        return x

    def stage(x, y):
        x = tf.numpy_function(slow, [x], tf.float32)
        x.set_shape([None, FEATURES])
        return x, y

    return dataset(tf, n, batch).map(stage)


def test_slow_map_is_highly_input_bound(tf, caplog):
    probe = InputProbe()
    stall = InputStallCallback(probe, warmup_steps=2)
    with caplog.at_level(logging.INFO, logger="tfopt"):
        history = model().fit(probe.instrument(slow_dataset(tf)), epochs=1, verbose=0,
                              callbacks=[stall])
    percent = history.history["input_bound_percent"][0]
    assert percent >= 20, percent
    assert stall.last_kind is InputBound.HIGH
    assert history.history["input_wait_seconds"][0] >= 0.02 * 5  # >= 5 of 6 counted batches
    assert any("highly input-bound" in r.message and "tfopt.analyze(dataset)" in r.message
               and "tfopt.build_pipeline" in r.message for r in caplog.records)


def test_fast_in_memory_data_with_heavier_model_is_not_input_bound(tf):
    probe = InputProbe()
    stall = InputStallCallback(probe, warmup_steps=2)
    data = dataset(tf, n=1024, batch=128).cache().prefetch(2)
    history = model(units=1024).fit(probe.instrument(data), epochs=2, verbose=0,
                                   callbacks=[stall])
    assert history.history["input_bound_percent"][1] < 5
    assert stall.last_kind is InputBound.NOT


def test_stall_without_probe_warns_that_it_sees_only_gaps(tf, caplog):
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        model().fit(slow_dataset(tf, n=128, sleep_s=0.001), epochs=1, verbose=0,
                    callbacks=[InputStallCallback(warmup_steps=0)])
    assert any("without an InputProbe" in r.message for r in caplog.records)


def test_gpu_stats_with_fake_nvml_log_mean_and_max_per_gpu(tf):
    nvml = make_fake_nvml([
        FakeGpu(gpu_util=[20, 60], power_mw=[100_000, 300_000], power_limit_mw=400_000,
                temperature=[50, 70], memory_used=[1 << 30, 3 << 30]),
        FakeGpu(gpu_util=90, unsupported=frozenset({"power_mw"})),
    ])
    gpu = GpuStatsCallback(interval_s=0.005, module=nvml)
    history = model().fit(slow_dataset(tf, n=128, sleep_s=0.025), epochs=2, verbose=0,
                          callbacks=[gpu])
    h = history.history
    # the fake cycles 20, 60, ...: both values seen in an epoch of ~100 ms at 5 ms a sample
    assert h["gpu0_util_max"] == [60, 60]
    assert all(20 < v < 60 for v in h["gpu0_util_mean"])
    assert h["gpu0_power_w_max"] == [300.0, 300.0]
    assert h["gpu0_power_percent_max"] == [75.0, 75.0]
    assert h["gpu0_temperature_c_max"] == [70, 70]
    assert h["gpu0_memory_mib_max"] == [3072.0, 3072.0]
    assert h["gpu1_util_mean"] == [90.0, 90.0]
    assert "gpu1_power_w_mean" not in h  # not supported: left out, not zero
    assert gpu.sampler is None and nvml.init_count == 0  # stopped and shut down


def test_gpu_stats_log_the_gpm_counters_where_the_gpu_has_them_and_leave_them_out_elsewhere(tf):
    nvml = make_fake_nvml([
        FakeGpu(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0),
                gpm={"sm_active": [40.0, 60.0], "sm_occupancy": 25.0, "tensor_active": 35.0,
                     "dram_bw_util": 15.0}),
        FakeGpu(name="NVIDIA A100-SXM4-40GB"),
    ])
    # samples more than NVML's 100 ms apart, epochs long enough for several
    gpu = GpuStatsCallback(interval_s=0.15, module=nvml)
    history = model().fit(slow_dataset(tf, n=256, sleep_s=0.07), epochs=2, verbose=0,
                          callbacks=[gpu])
    h = history.history
    assert all(40.0 <= v <= 60.0 for v in h["gpu0_sm_active_mean"])
    assert h["gpu0_sm_occupancy_max"] == [25.0, 25.0]
    assert h["gpu0_tensor_active_mean"] == [35.0, 35.0]
    assert h["gpu0_dram_bw_util_max"] == [15.0, 15.0]
    assert not any(key.startswith(("gpu1_sm", "gpu1_tensor", "gpu1_dram")) for key in h)
    assert "gpu1_util_mean" in h  # the A100 is sampled; only the counters it lacks are absent
    assert nvml.gpm_buffers == 0 and nvml.init_count == 0


def test_gpu_stats_short_epoch_still_gets_one_sample(tf):
    nvml = make_fake_nvml([FakeGpu(gpu_util=55)])
    history = model().fit(dataset(tf, n=32), epochs=1, verbose=0,
                          callbacks=[GpuStatsCallback(interval_s=3600, module=nvml)])
    assert history.history["gpu0_util_mean"] == [55.0]


def test_gpu_stats_without_driver_warns_once_and_training_goes_on(tf, caplog):
    # the real path on this machine: pynvml absent or libnvidia-ml missing
    from tfopt.gpu.nvml import nvml_state

    if nvml_state().ok:
        pytest.skip("this machine has an NVIDIA GPU")
    gpu = GpuStatsCallback(interval_s=0.01)
    with caplog.at_level(logging.DEBUG, logger="tfopt"):
        history = model().fit(dataset(tf), epochs=2, verbose=0, callbacks=[gpu])
    assert len(history.history["loss"]) == 2
    assert not any(key.startswith("gpu") for key in history.history)
    tfopt_records = [r for r in caplog.records if r.name == "tfopt" and r.levelno >= logging.INFO]
    assert len(tfopt_records) == 1 and tfopt_records[0].levelno == logging.WARNING
    assert "GPU stats off" in tfopt_records[0].message


def test_gpu_stats_failing_nvml_never_fails_training(tf):
    nvml = make_fake_nvml([FakeGpu()], init_error=18)  # driver/library version mismatch
    history = model().fit(dataset(tf), epochs=1, verbose=0,
                          callbacks=[GpuStatsCallback(module=nvml)])
    assert len(history.history["loss"]) == 1


def test_bad_arguments_are_rejected():
    from tfopt.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="batch_size=0: expected a positive integer"):
        ThroughputCallback(batch_size=0)
    with pytest.raises(InvalidArgumentError, match="batch_size=32.0: expected"):
        ThroughputCallback(batch_size=32.0)
    with pytest.raises(InvalidArgumentError, match="interval_s"):
        GpuStatsCallback(interval_s=0)
    with pytest.raises(InvalidArgumentError, match="warmup_steps"):
        InputStallCallback(warmup_steps=-1)


STRATEGY_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from tfopt._tf import import_tensorflow
    tf = import_tensorflow()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from tfopt.train.callbacks import InputProbe, ThroughputCallback, InputStallCallback
    rng = np.random.default_rng(0)
    x = rng.random((256, 8), dtype=np.float32); y = rng.random((256, 1), dtype=np.float32)
    probe = InputProbe()  # outside the scope: plain CPU variables
    data = probe.instrument(tf.data.Dataset.from_tensor_slices((x, y)).batch(32))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
        # steps_per_execution > 1 under MirroredStrategy fails inside Keras 3.15 itself
        # ("You must feed a value for placeholder tensor"), probe or not
        model.compile("sgd", "mse")
    throughput = ThroughputCallback(probe=probe, warmup_steps=0)
    history = model.fit(data, epochs=1, verbose=0,
                        callbacks=[throughput, InputStallCallback(probe, warmup_steps=0)])
    json.dump({"replicas": strategy.num_replicas_in_sync, "probe": probe.read()[1:],
               "steps": throughput.timer.summary().steps,
               "history": history.history}, sys.stdout)
""")


def test_under_mirrored_strategy_batch_is_global(tmp_path):
    result = subprocess.run([sys.executable, "-c", STRATEGY_SCRIPT], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["replicas"] == 2
    examples, batches = out["probe"]
    # global batches of 32, counted once, not per replica (the iterator Keras opens to build
    # the model reads a few batches ahead, so there can be more than 8)
    assert examples == 32 * batches and batches >= 8
    assert out["steps"] == 8
    h = out["history"]
    assert h["examples_per_second"][0] == pytest.approx(32 * h["steps_per_second"][0])
    assert 0 <= h["input_bound_percent"][0] <= 100


def test_an_input_bound_epoch_of_a_tfopt_pipeline_gets_advice_from_its_plan(tf, tmp_path,
                                                                            caplog):
    from conftest import small_image_dataset

    import tfopt

    builder = tfopt.PipelineBuilder(small_image_dataset(tmp_path), batch_size=4,
                                    image_size=16, training=True, cache=False)
    probe = InputProbe()
    stall = InputStallCallback(probe, warmup_steps=2, pipeline=builder)
    with caplog.at_level(logging.INFO, logger="tfopt"):
        model().fit(probe.instrument(slow_dataset(tf)), epochs=2, verbose=0, callbacks=[stall])
    assert stall.last_kind is InputBound.HIGH
    first, second = [r.message for r in caplog.records if "highly input-bound" in r.message]
    assert builder.stall_advice() in first and "the cache is off" in first
    assert "tfopt.build_pipeline" not in first  # not the generic line for tfopt's own pipeline
    # the same advice, a paragraph long, is given in full once a fit
    assert second.startswith("epoch 2: ") and second.endswith("; the advice of epoch 1")


def test_a_fit_of_less_than_one_pass_of_a_cached_pipeline_is_warned_once(tf, tmp_path, caplog):
    from conftest import small_image_dataset

    import tfopt

    builder = tfopt.PipelineBuilder(small_image_dataset(tmp_path), batch_size=4,
                                    image_size=16, training=True)
    records = builder.source.num_records  # 21: 3 classes of 6 JPEGs and a PNG
    assert builder.choices.cache.value == "decoded" and records == 21

    def warnings_of_fit(steps, epochs):
        caplog.clear()
        stall = InputStallCallback(InputProbe(), pipeline=builder)
        with caplog.at_level(logging.WARNING, logger="tfopt"):
            model().fit(dataset(tf).repeat(), steps_per_epoch=steps, epochs=epochs, verbose=0,
                        callbacks=[stall])
        return [r.message for r in caplog.records if "less than one pass" in r.message]

    # Keras reads 2 x 2 batches of 4 through one iterator: 16 of the 21 records
    (line,) = warnings_of_fit(2, 2)
    assert line.startswith("this fit (2 steps per epoch x 2 epochs) reads 4 batches of 4")
    assert builder.partial_pass_note(4) in line and "cache=False" in line
    assert warnings_of_fit(3, 2) == []  # 24 examples: the pass ends in the second epoch


class _HoldsEpochStart(keras.callbacks.Callback):
    """Sleeps in on_epoch_begin from the second epoch on: after InputStallCallback's hook, so
    it stands for a slow iterator release between the epoch's start and its first batch."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_epoch_begin(self, epoch, logs=None):
        if epoch > 0:
            time.sleep(self.seconds)


def _epoch_start_warnings(caplog):
    return [r for r in caplog.records if "before its first batch" in r.message]


def test_a_slow_epoch_start_is_logged_and_advised_once_as_a_warning(tf, caplog):
    probe = InputProbe()
    stall = InputStallCallback(probe)
    data = probe.instrument(dataset(tf, n=64))  # 2 steps: short epochs, 0.6 s is most of one
    with caplog.at_level(logging.INFO, logger="tfopt"):
        history = model().fit(data, epochs=3, verbose=0,
                              callbacks=[stall, _HoldsEpochStart(0.6)])
    first, second, third = history.history["epoch_start_seconds"]
    assert first < 0.5 and second >= 0.6 and third >= 0.6
    warned, later = _epoch_start_warnings(caplog)
    assert (warned.levelno, later.levelno) == (logging.WARNING, logging.INFO)
    assert warned.message.startswith(f"epoch 2 waited {second:.1f} s")
    assert "fit(dataset.repeat(), steps_per_epoch=2, ...)" in warned.message
    assert later.message.startswith("epoch 3 waited")


def test_epochs_that_start_at_once_get_no_epoch_start_advice(tf, caplog):
    off = tf.data.Options()
    off.autotune.enabled = False  # no autotuning thread: the release is never held
    probe = InputProbe()
    stall = InputStallCallback(probe)
    with caplog.at_level(logging.INFO, logger="tfopt"):
        history = model().fit(probe.instrument(dataset(tf, n=64).with_options(off)), epochs=3,
                              verbose=0, callbacks=[stall])
    assert len(history.history["epoch_start_seconds"]) == 3
    assert max(history.history["epoch_start_seconds"]) < 0.5
    assert _epoch_start_warnings(caplog) == []
