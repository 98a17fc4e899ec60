"""tfopt.Run: its planner on hand-made facts, its config's checks, and real runs: a fit, a
dataset without a validation split, the steps_per_execution trial kept in the workdir, and a
process killed with SIGKILL mid-epoch whose rerun ends with an uninterrupted run's weights."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest

from tests.conftest import made_once, make_demo_shards
from tfopt.errors import InvalidArgumentError
from tfopt.run.config import RunConfig
from tfopt.run.plan import SPE_UNTRIED, RunFacts, SpeSource, calls_that_divide, plan_run

FACTS = RunFacts(replicas=1, workers=1, chief=True, policy="float32", policy_reason="rule",
                 steps_per_epoch=1000, trial_steps=165, has_validation=True)


# -- the planner: pure, on hand-made facts ------------------------------------------------------


def test_one_replica_fuses_batch_norm_and_several_synchronise_it():
    config = RunConfig("shards/", image_size=32)
    assert plan_run(config, FACTS).batch_norm.value == "fused"
    several = plan_run(config, dataclasses.replace(FACTS, replicas=4))
    assert several.batch_norm.value == "synchronized" and several.global_batch == 256
    with pytest.raises(InvalidArgumentError, match="batch_norm='fused' with 4 replicas"):
        plan_run(config.replace(batch_norm="fused"), dataclasses.replace(FACTS, replicas=4))


def test_the_planners_reasons_say_why_not_what_one_machine_measured():
    from tests.test_code_says_why import measurement_spans

    config = RunConfig("shards/", image_size=32, effective_batch_size=256)
    fused = plan_run(config, FACTS)
    assert "one op per layer instead of a dozen passes" in fused.batch_norm_reason
    for facts in (FACTS, dataclasses.replace(FACTS, replicas=4),
                  dataclasses.replace(FACTS, workers=2, has_validation=False)):
        plan = plan_run(config, facts)
        reasons = [value for name, value in vars(plan).items() if name.endswith("_reason")]
        assert len(reasons) == 6 and not any(map(measurement_spans, reasons)), reasons


def test_accumulation_takes_a_multiple_of_the_global_batch():
    plan = plan_run(RunConfig("s", batch_size=32, effective_batch_size=256),
                    dataclasses.replace(FACTS, replicas=2))
    assert plan.accumulation_steps == 4 and "4 micro-batches of 64" in plan.accumulation_reason
    with pytest.raises(InvalidArgumentError, match="effective_batch_size=100: expected a "
                                                   "multiple of the global batch 64"):
        plan_run(RunConfig("s", batch_size=32, effective_batch_size=100),
                 dataclasses.replace(FACTS, replicas=2))


def test_steps_per_execution_given_cached_trialled_or_untried_and_why():
    config = RunConfig("s", image_size=32)
    assert plan_run(config.replace(steps_per_execution=8), FACTS).steps_per_execution == 8
    trial = plan_run(config, FACTS)
    assert trial.steps_per_execution is None and trial.spe_source is SpeSource.TRIAL
    cached = plan_run(config, dataclasses.replace(FACTS, cached_steps_per_execution=16))
    assert (cached.steps_per_execution, cached.spe_source) == (16, SpeSource.CACHED)
    short = plan_run(config, dataclasses.replace(FACTS, steps_per_epoch=20))
    assert short.steps_per_execution == SPE_UNTRIED and "more than an epoch of 20" in \
        short.spe_reason
    workers = plan_run(config, dataclasses.replace(FACTS, workers=2))
    assert workers.spe_source is SpeSource.UNTRIED and "several workers" in workers.spe_reason


def test_where_an_epoch_is_a_pass_its_calls_divide_it_and_describe_says_so():
    assert [calls_that_divide(4, steps) for steps in (40, 42, 41, 3)] == [4, 3, 1, 3]
    assert calls_that_divide(16, 42) == 14 and calls_that_divide(4, None) == 4
    config = RunConfig("s", image_size=32)
    pass_of_42 = dataclasses.replace(FACTS, steps_per_epoch=42, epoch_is_pass=True)
    untried = plan_run(config, pass_of_42)
    assert untried.steps_per_execution == 3 and untried.spe_source is SpeSource.UNTRIED
    assert "4 lowered to 3, which divides the epoch's 42 steps" in untried.spe_reason
    given = plan_run(config.replace(steps_per_execution=8), pass_of_42)
    assert given.steps_per_execution == 7 and given.spe_source is SpeSource.GIVEN
    cached = plan_run(config, dataclasses.replace(pass_of_42, cached_steps_per_execution=16))
    assert cached.steps_per_execution == 14
    # shards: an epoch counts steps of one shuffled stream, so the given value stands
    shards = plan_run(config.replace(steps_per_execution=8),
                      dataclasses.replace(FACTS, steps_per_epoch=42))
    assert shards.steps_per_execution == 8 and shards.spe_reason == "given"


def test_xla_is_given_tried_where_an_epoch_pays_for_it_or_left_to_keras_and_why():
    config = RunConfig("s", image_size=32)
    passes = dataclasses.replace(FACTS, epoch_is_pass=True)  # arrays, a DataFrame, a dataset
    assert plan_run(config, passes).jit_compile is None  # timed at compile
    given = plan_run(config.replace(jit_compile=False), passes)
    assert (given.jit_compile, given.xla_reason) == (False, "given")
    cached = plan_run(config, dataclasses.replace(passes, cached_jit_compile=True))
    assert cached.jit_compile is True and "earlier trial" in cached.xla_reason
    shapes = plan_run(config, dataclasses.replace(passes, variable_axes=("x axis 1",)))
    assert shapes.jit_compile is False and "change shape (x axis 1)" in shapes.xla_reason
    short = plan_run(config, dataclasses.replace(passes, steps_per_epoch=20))
    workers = plan_run(config, dataclasses.replace(passes, workers=2))
    shards = plan_run(config, FACTS)
    for plan, why in ((short, "epoch this short"), (workers, "several workers"),
                      (shards, "synthetic images")):
        assert plan.jit_compile == "auto" and "Keras's 'auto'" in plan.xla_reason
        assert why in plan.xla_reason
    # asked for: timed whatever the epoch's length, but never where a trial cannot run
    asked = config.replace(jit_compile="trial")
    assert plan_run(asked, dataclasses.replace(passes, steps_per_epoch=20)).jit_compile is None
    for facts in (dataclasses.replace(passes, workers=2), FACTS):
        assert plan_run(asked, facts).jit_compile == "auto"
    assert plan_run(asked, dataclasses.replace(passes, variable_axes=("x axis 1",))
                    ).jit_compile is False
    with pytest.raises(InvalidArgumentError, match="jit_compile.*'trial'"):
        RunConfig("s", jit_compile="yes")


def test_a_batched_dataset_keeps_its_batch_and_a_held_out_fraction_is_named():
    kept = dataclasses.replace(FACTS, keeps_batches=True, dataset_batch=40,
                               validation_reason="the given Dataset")
    plan = plan_run(RunConfig("s"), kept)
    assert plan.global_batch == 40 and plan.validation_reason == "the given Dataset"
    unknown = plan_run(RunConfig("s"), dataclasses.replace(kept, dataset_batch=None))
    assert unknown.global_batch is None
    with pytest.raises(InvalidArgumentError, match="effective_batch_size=256: needs a known "
                                                   "global batch"):
        plan_run(RunConfig("s", effective_batch_size=256),
                 dataclasses.replace(kept, dataset_batch=None))
    rebatched = plan_run(RunConfig("s", batch_size=16), dataclasses.replace(FACTS, replicas=2))
    assert rebatched.global_batch == 32  # batch_size= given: per replica, as for shards
    endless = plan_run(RunConfig("s"), dataclasses.replace(FACTS, steps_per_epoch=None))
    assert endless.spe_source is SpeSource.UNTRIED and "of unknown length" in endless.spe_reason


def test_no_validation_split_is_said_and_the_best_model_follows_the_training_loss():
    plan = plan_run(RunConfig("s"), dataclasses.replace(FACTS, has_validation=False))
    assert not plan.validation and plan.monitor == "loss"
    assert "no validation split" in plan.validation_reason
    assert plan_run(RunConfig("s"), FACTS).monitor == "val_loss"
    assert not plan_run(RunConfig("s", validation=None), FACTS).validation


@pytest.mark.parametrize("field, value, message", [
    ("precision", "fp16", "precision='fp16': expected one of auto, float32"),
    ("strategy", "gpus", "strategy='gpus': expected one of auto, default"),
    ("steps_per_execution", 0, "steps_per_execution=0"),
    ("augment", "flip", "augment='flip'"),
    ("batch_norm", "sync", "batch_norm"),
    ("batch_size", True, "batch_size=True"),
    ("seed", -1, "seed=-1"),
])
def test_config_names_the_bad_field(field, value, message):
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        RunConfig("shards/", **{field: value})


def test_two_configs_of_the_same_arguments_are_equal():
    assert RunConfig("s", image_size=32, seed=1) == RunConfig("s", image_size=32, seed=1)
    assert RunConfig("s").replace(batch_size=8).batch_size == 8


# -- real runs ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return made_once(tmp_path_factory, "run_data", lambda root: make_demo_shards(
        root, count=240, classes=3, min_size=32, max_size=48, val_fraction=0.2,
        shards=2)) / "shards"


def _model(run, keras):
    from tfopt.models import build_model

    with run.scope():
        return build_model("cnn", image_size=run.config.image_size, classes=run.num_classes,
                           size="tiny")


def test_a_run_fits_with_its_choices_described_and_its_files_in_the_workdir(shards, tmp_path):
    import keras

    from tfopt.run import Run

    run = Run(shards, image_size=32, batch_size=16, workdir=tmp_path / "run", seed=0,
              steps_per_execution=2)
    text = run.describe()
    for line in ("strategy     default", "batch        16 per replica x 1 = 16 per step",
                 "precision", "batch norm   fused", "steps/call   2: given",
                 "validation   the source's validation split", "resume       a new run",
                 "training pipeline:"):
        assert line in text, text
    from tests.test_code_says_why import measurement_spans
    # reasons, not what one machine measured once (a line of describe() is one statement)
    assert not [line for line in text.splitlines() if measurement_spans(line)], text
    model = _model(run, keras)
    run.compile(model, "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
    assert model.steps_per_execution == 2
    history = run.fit(model, epochs=2, verbose=0)
    assert len(history.history["val_loss"]) == 2 and "examples_per_second" in history.history
    # the backup is gone after a normal end; the best model and the history stay
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "best.json", "best.keras", "history.csv"]
    assert len((tmp_path / "run" / "history.csv").read_text().splitlines()) == 3


def _cache_ops(dataset) -> list[str]:
    from tfopt.analysis.advice import CACHE_OPS
    from tfopt.analysis.tfapi import serialize

    return [node.op for node in serialize(dataset).node if node.op in CACHE_OPS]


def _record_fits(monkeypatch) -> list:
    """(training, validation) datasets of each ``keras.Model.fit`` from here on, which still
    trains."""
    import keras

    read = []
    fit = keras.Model.fit

    def recording_fit(model, x=None, *args, validation_data=None, **kwargs):
        read.append((x, validation_data))
        return fit(model, x, *args, validation_data=validation_data, **kwargs)

    monkeypatch.setattr(keras.Model, "fit", recording_fit)
    return read


def test_a_fit_of_one_pass_reads_without_the_cache_and_a_longer_one_with_it(
        shards, monkeypatch, caplog):
    """A cache serves only the passes after the one that fills it: one epoch (and its one
    validation pass) get nothing from it, so they read without; two epochs keep it."""
    import keras

    from tfopt.run import Run

    read = _record_fits(monkeypatch)
    run = Run(shards, image_size=32, batch_size=16, seed=0, steps_per_execution=1)
    assert run.train_pipeline.plan.cache.value == "decoded"
    assert "a fit that reads one pass or less" in run.describe()
    model = _model(run, keras)
    run.compile(model, "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with caplog.at_level("INFO", logger="tfopt"):
        run.fit(model, epochs=1, verbose=0)
    train, validation = read[-1]
    assert _cache_ops(train) == [] and _cache_ops(validation) == []
    assert "train pipeline runs without its decoded cache" in caplog.text
    assert run.train_pipeline.plan.cache.value == "decoded"  # the plan itself is unchanged
    run.fit(model, epochs=2, verbose=0)
    train, validation = read[-1]
    assert len(_cache_ops(train)) == 1 and len(_cache_ops(validation)) == 1


def test_a_cache_asked_for_is_kept_in_a_fit_of_one_pass(shards, monkeypatch):
    """cache=True is the training pipeline's: kept for one epoch; the validation pipeline's
    own cache (planned "auto") still goes."""
    import keras

    from tfopt.run import Run

    read = _record_fits(monkeypatch)
    run = Run(shards, image_size=32, batch_size=16, seed=0, steps_per_execution=1, cache=True)
    model = _model(run, keras)
    run.compile(model, "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    run.fit(model, epochs=1, verbose=0)
    train, validation = read[-1]
    assert len(_cache_ops(train)) == 1 and _cache_ops(validation) == []


def test_without_a_validation_split_it_trains_on_the_loss_and_says_so(tmp_path):
    import keras

    from tfopt.run import Run

    source = make_demo_shards(tmp_path, count=60, classes=2, min_size=32, max_size=40)
    run = Run(source, image_size=32, batch_size=16, workdir=tmp_path / "run")
    assert run.validation is None and run.plan.monitor == "loss"
    assert "no validation split" in run.describe()
    model = _model(run, keras)
    run.compile(model, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    run.fit(model, epochs=1, verbose=0)
    assert json.loads((tmp_path / "run" / "best.json").read_text())["monitor"] == "loss"


def test_a_folder_another_tool_wrote_trains_and_finds_its_validation_files(tmp_path):
    """No manifest: the splits are the file names' (train-/validation-), as the pipelines
    read them; a folder of train files alone has no validation split (not an error)."""
    import keras

    import tfopt
    from tfopt.bench.demo import write_foreign_shards
    from tfopt.run import Run

    images = tmp_path / "images"
    tfopt.make_demo_data(images, count=40, classes=2, min_size=32, max_size=48, seed=3)
    train_only = tmp_path / "garden"
    write_foreign_shards(images, train_only, side=48, shards=2)
    run = Run(train_only, image_size=32, batch_size=16)
    assert run.validation is None and "no validation split" in run.describe()
    both = tmp_path / "both"
    both.mkdir()
    for path in train_only.iterdir():
        (both / path.name).write_bytes(path.read_bytes())
    write_foreign_shards(images, tmp_path / "val", side=48, shards=1, split="validation")
    for path in (tmp_path / "val").iterdir():
        (both / path.name).write_bytes(path.read_bytes())
    run = Run(both, image_size=32, batch_size=16, steps_per_execution=2)
    assert run.validation is not None
    # the header walk counted the records: the epoch's length is known, and so is the
    # validation pass's (Keras warned "Your input ran out of data" at the end of a pass of
    # unknown length run 2 steps per call)
    assert run.steps_per_epoch == 3
    model = _model(run, keras)
    run.compile(model, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = run.fit(model, epochs=1, verbose=0)
    assert len(history.history["val_loss"]) == 1
    assert not [w for w in caught if "ran out of data" in str(w.message)]


def test_steps_per_execution_is_given_to_the_run_not_to_compile(shards):
    import keras

    from tfopt.run import Run

    run = Run(shards, image_size=32, batch_size=16)
    with pytest.raises(InvalidArgumentError, match="give it to the Run"):
        run.compile(_model(run, keras), "adam", "mse", steps_per_execution=4)


@pytest.mark.slow
def test_the_trial_runs_once_and_a_rerun_reads_its_choice_from_the_workdir(tmp_path):
    import keras

    from tfopt.run import Run
    from tfopt.run.plan import SpeSource
    from tfopt.run.workdir import SPE_FILE

    # 400 records at batch 2: an epoch of 180+ steps pays for the 165-step trial
    source = make_demo_shards(tmp_path, count=400, classes=2, min_size=16, max_size=20)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    first = Run(source, image_size=16, batch_size=2, workdir=tmp_path / "run")
    assert first.plan.spe_source is SpeSource.TRIAL
    first.compile(_model(first, keras), "adam", loss)
    chosen = first.plan.steps_per_execution
    assert sorted(first.steps_per_execution_trial) == [1, 4, 16] and chosen in (1, 4, 16)
    assert json.loads((tmp_path / "run" / SPE_FILE).read_text())["value"] == chosen
    again = Run(source, image_size=16, batch_size=2, workdir=tmp_path / "run")
    model = _model(again, keras)
    again.compile(model, "adam", loss)
    assert again.plan.spe_source is SpeSource.CACHED and model.steps_per_execution == chosen


RESUME_SCRIPT = textwrap.dedent("""
    import os, signal, sys, zlib
    import numpy as np
    import keras
    import tensorflow as tf
    from tfopt.run import Run
    from tfopt.models import build_model

    shards, workdir, kill_epoch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tf.config.experimental.enable_op_determinism()
    run = Run(shards, image_size=32, batch_size=16, workdir=workdir, seed=3,
              steps_per_execution=4)
    with run.scope():
        model = build_model("cnn", image_size=32, classes=run.num_classes, size="tiny")
    run.compile(model, "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Crash(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            print("EPOCH", epoch, flush=True)

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == kill_epoch and batch >= 4:  # mid-epoch, after a backup
                os.kill(os.getpid(), signal.SIGKILL)

    run.fit(model, epochs=3, callbacks=[Crash()], verbose=0)
    weights = b"".join(np.asarray(w, np.float32).tobytes() for w in model.get_weights())
    print("WEIGHTS %08x" % zlib.crc32(weights), flush=True)
""")


def _train(script, shards, workdir, kill_epoch):
    done = subprocess.run([sys.executable, str(script), str(shards), str(workdir),
                           str(kill_epoch)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    epochs = [int(e) for e in re.findall(r"^EPOCH (\d)", done.stdout, re.MULTILINE)]
    weights = re.findall(r"^WEIGHTS (\w+)", done.stdout, re.MULTILINE)
    return done, epochs, weights[0] if weights else None


@pytest.mark.slow
def test_killed_mid_epoch_the_same_script_again_ends_with_an_uninterrupted_runs_weights(
        shards, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(RESUME_SCRIPT)
    done, epochs, reference = _train(script, shards, tmp_path / "reference", -1)
    assert done.returncode == 0 and epochs == [0, 1, 2], done.stderr[-3000:]

    done, epochs, weights = _train(script, shards, tmp_path / "run", 1)
    assert done.returncode == -signal.SIGKILL and epochs == [0, 1] and weights is None
    backup = json.loads((tmp_path / "run" / "backup" / "latest.json").read_text())
    assert backup["epoch"] == 1

    done, epochs, weights = _train(script, shards, tmp_path / "run", -1)
    assert done.returncode == 0 and epochs == [1, 2], done.stderr[-3000:]
    assert weights == reference  # bit for bit: the stream resumed where it would have been


PREEMPTED_WORKERS_SCRIPT = textwrap.dedent("""
    import json, os, signal, sys, zlib
    import numpy as np
    import keras
    from tfopt.run import Run
    from tfopt.models import build_model

    shards, workdir, marker = sys.argv[1], sys.argv[2], sys.argv[3]
    worker = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    run = Run(shards, image_size=32, batch_size=8, workdir=workdir, seed=3,
              steps_per_execution=1)
    print("PLAN", run.plan.workers, run.plan.global_batch, run.plan.batch_norm.value,
          flush=True)
    with run.scope():
        model = build_model("cnn", image_size=32, classes=run.num_classes, size="tiny")
    run.compile(model, "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Preempt(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            print("EPOCH", epoch, flush=True)

        def on_train_batch_end(self, batch, logs=None):
            if worker != 1 or self.epoch != 1 or os.path.exists(marker):
                return
            if os.environ["TO"] == "kill" and batch >= 4:  # worker 1 dies mid-epoch
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            # the scheduler's SIGTERM, to the launcher (which hands it to every worker) or
            # to worker 1 alone: each worker notes it at its own moment
            if os.environ["TO"] != "kill" and batch == 3:
                open(marker, "w").close()
                os.kill(os.getppid() if os.environ["TO"] == "launcher" else os.getpid(),
                        signal.SIGTERM)

    run.fit(model, epochs=3, callbacks=[Preempt()], verbose=0)
    weights = b"".join(np.asarray(w, np.float32).tobytes() for w in model.get_weights())
    print("WEIGHTS %08x" % zlib.crc32(weights), flush=True)
""")


def launch_preempted_workers(folder, shards, workdir, marker, to="launcher", grace=30):
    """PREEMPTED_WORKERS_SCRIPT under ``tfopt launch -n 2``: the process, and each worker's
    lines of stdout by its index."""
    script = folder / "train.py"
    script.write_text(PREEMPTED_WORKERS_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "tfopt", "launch", "-n", "2", "--grace", str(grace),
         sys.executable, str(script), str(shards), str(workdir), str(marker)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TO": to})
    seen = {index: [line.split("] ", 1)[1] for line in done.stdout.splitlines()
                    if line.startswith(f"[worker {index}] ")] for index in (0, 1)}
    return done, seen


@pytest.fixture(scope="module")
def uninterrupted_workers_weights(shards, tmp_path_factory):
    """The weights' checksum line of PREEMPTED_WORKERS_SCRIPT never signalled (its marker
    exists from the start): one job serves every test below, in whichever pytest process."""
    def make(folder):
        never = folder / "uninterrupted"
        never.touch()
        done, seen = launch_preempted_workers(folder, shards, folder / "reference", never)
        assert done.returncode == 0, done.stderr[-3000:]
        (folder / "weights.txt").write_text(
            "\n".join(line for line in seen[0] if line.startswith("WEIGHTS")))

    return made_once(tmp_path_factory, "preempted_workers_reference",
                     make).joinpath("weights.txt").read_text().splitlines()


@pytest.mark.slow
def test_under_tfopt_launch_a_killed_worker_resumes_from_the_chiefs_backup(
        shards, tmp_path, uninterrupted_workers_weights):
    marker, workdir = tmp_path / "killed", tmp_path / "run"

    def launch():
        # the worker left is stopped as the launcher stops it: SIGTERM, SIGKILL 5 s after
        return launch_preempted_workers(tmp_path, shards, workdir, marker, to="kill", grace=5)

    done, seen = launch()
    assert marker.exists(), done.stderr[-3000:]
    assert done.returncode == 128 + signal.SIGKILL, done.stderr[-3000:]
    assert "tfopt launch: worker 1 failed with exit code 137" in done.stderr, done.stderr[-3000:]
    assert "PLAN 2 16 synchronized" in seen[0], done.stdout[-3000:]  # global batch, synced BN
    # the chief's backup of epoch 1 alone is there: worker 1 wrote nothing in the workdir
    assert json.loads((workdir / "backup" / "latest.json").read_text())["epoch"] == 1
    assert sorted(p.name for p in (workdir / "backup").iterdir()) == [
        "latest.json", "weights-000001.weights.h5"]

    done, seen = launch()
    assert done.returncode == 0, done.stderr[-3000:]
    for index in (0, 1):  # both restored the chief's backup and ran the last two epochs
        assert [line for line in seen[index] if line.startswith("EPOCH")] == [
            "EPOCH 1", "EPOCH 2"], done.stdout[-3000:]
    weights = [[line for line in seen[index] if line.startswith("WEIGHTS")] for index in (0, 1)]
    assert weights[0] and weights[0] == weights[1]  # synchronous training: the same weights
    assert weights[0] == uninterrupted_workers_weights  # bit for bit: the same stream
    assert sorted(p.name for p in workdir.iterdir()) == ["best.json", "best.keras",
                                                         "history.csv"]


@pytest.mark.slow
@pytest.mark.parametrize("to", ["launcher", "worker"])
def test_under_tfopt_launch_sigterm_stops_every_worker_at_one_step_and_the_rerun_resumes_there(
        shards, tmp_path, to, uninterrupted_workers_weights):
    marker, workdir = tmp_path / "signalled", tmp_path / "run"

    def launch():
        return launch_preempted_workers(tmp_path, shards, workdir, marker, to)

    reference = uninterrupted_workers_weights
    assert reference
    done, seen = launch()
    assert marker.exists() and done.returncode == 75, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    # both stopped at one step (the launcher's copy of the signal reaches each worker at its
    # own moment: the step is the first boundary after the first of them noted it)
    stops = {index: re.findall(rf"^\[worker {index}\] .*training stopped at epoch 2, step "
                               r"(\d+), its backup written", done.stderr, re.MULTILINE)
             for index in (0, 1)}
    assert stops[0] and stops[0] == stops[1], done.stderr[-3000:]
    record = json.loads((workdir / "backup" / "latest.json").read_text())
    assert (record["epoch"], record["steps"]) == (1, int(stops[0][0]))  # the chief's
    assert record["steps"] == 5 if to == "worker" else record["steps"] >= 5
    assert "every worker stopped at one step" in done.stderr

    done, seen = launch()
    assert done.returncode == 0, done.stderr[-3000:]
    weights = [[line for line in seen[index] if line.startswith("WEIGHTS")] for index in (0, 1)]
    assert weights[0] and weights[0] == weights[1]
    assert weights[0] == reference  # bit for bit: resumed at the step both stopped at


# -- backups kept and copied: keep=, copy_to= ----------------------------------------------------


def test_keep_and_copy_to_are_in_the_frozen_config_and_checked(tmp_path):
    config = RunConfig("shards", workdir=tmp_path, keep=2, copy_to=tmp_path / "copy",
                       copy_keep=4)
    assert (config.keep, config.copy_to, config.copy_keep) == (2, str(tmp_path / "copy"), 4)
    assert config == RunConfig("shards", workdir=tmp_path, keep=2,
                               copy_to=str(tmp_path / "copy"), copy_keep=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.copy_to = "elsewhere"
    for options, message in [
        ({"workdir": tmp_path, "keep": 0}, "keep=0: expected a positive number of backups"),
        ({"copy_to": tmp_path}, "copy_to=.*: expected None without a workdir"),
        ({"workdir": tmp_path, "copy_to": ""}, "copy_to='': expected a folder path or a URL"),
        ({"workdir": tmp_path, "copy_keep": 2}, "copy_keep=2: expected None without copy_to"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            RunConfig("shards", **options)


COPY_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time, zlib
    import numpy as np
    import keras
    import tensorflow as tf
    from tfopt.run import Run
    from tfopt.models import build_model
    from tfopt.train.backup_store import BackupStore

    shards, workdir, copy_to, kill_epoch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    tf.config.experimental.enable_op_determinism()
    run = Run(shards, image_size=32, batch_size=16, workdir=workdir, seed=3,
              steps_per_execution=4, keep=2, copy_to=copy_to)
    print("DESCRIBE", run.describe().replace("\\n", " | "), flush=True)
    with run.scope():
        model = build_model("cnn", image_size=32, classes=run.num_classes, size="tiny")
    run.compile(model, "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Crash(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            print("EPOCH", epoch, flush=True)

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == kill_epoch and batch >= 4:
                # after the copy of the last backup (epoch kill_epoch's start) is complete
                store, deadline = BackupStore(copy_to), time.monotonic() + 60
                while not any(v.record is not None and v.record.epoch == kill_epoch
                              for v in store.versions()) and time.monotonic() < deadline:
                    time.sleep(0.02)
                os.kill(os.getpid(), signal.SIGKILL)

    run.fit(model, epochs=3, callbacks=[Crash()], verbose=0)
    weights = b"".join(np.asarray(w, np.float32).tobytes() for w in model.get_weights())
    print("WEIGHTS %08x" % zlib.crc32(weights), flush=True)
""")


@pytest.mark.slow
def test_killed_with_the_workdir_then_deleted_the_rerun_resumes_from_copy_to(shards, tmp_path):
    script, copy = tmp_path / "train.py", tmp_path / "other-disk" / "run"
    script.write_text(COPY_SCRIPT)

    def train(workdir, kill_epoch):
        done = subprocess.run([sys.executable, str(script), str(shards), str(workdir),
                               str(copy if workdir.name == "run" else tmp_path / "ref-copy"),
                               str(kill_epoch)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        epochs = [int(e) for e in re.findall(r"^EPOCH (\d)", done.stdout, re.MULTILINE)]
        weights = re.findall(r"^WEIGHTS (\w+)", done.stdout, re.MULTILINE)
        described = re.findall(r"^DESCRIBE (.*)$", done.stdout, re.MULTILINE)
        return done, epochs, weights[0] if weights else None, described[0]

    done, epochs, reference, _ = train(tmp_path / "reference", -1)
    assert done.returncode == 0 and epochs == [0, 1, 2], done.stderr[-3000:]

    done, epochs, weights, described = train(tmp_path / "run", 1)
    assert done.returncode == -signal.SIGKILL and epochs == [0, 1] and weights is None
    assert (f"backups      the 2 newest in {tmp_path / 'run' / 'backup'}, each checksummed; "
            f"each copied to {copy} in the background (all kept there)") in described
    shutil.rmtree(tmp_path / "run")

    done, epochs, weights, described = train(tmp_path / "run", -1)
    assert done.returncode == 0 and epochs == [1, 2], done.stderr[-3000:]
    assert f"resume       from the backup of epoch 1 in {copy}" in described
    assert "positioned for epoch" not in done.stderr  # the stream was placed for that epoch
    assert weights == reference  # bit for bit, from the copy alone


def test_mfu_is_over_the_gpus_datasheet_peak_and_none_for_a_gpu_the_table_lacks(monkeypatch):
    # the machine has no GPU: TensorFlow's device list and details are what is faked
    import tensorflow as tf

    from tfopt.gpu.peak import gpu_peak
    from tfopt.train.flops import device_peak

    gpus = [tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(2)]
    names = {gpus[0]: "NVIDIA H100 80GB HBM3", gpus[1]: "NVIDIA H100 80GB HBM3"}
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: gpus if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda device: {"device_name": names[device]})
    peak, _ = device_peak(workers=1, replicas=2, gpus=2)
    h100 = gpu_peak("NVIDIA H100 80GB HBM3")
    assert peak.for_dtype("mixed_bfloat16") == 2 * h100.for_dtype("bfloat16")
    assert peak.for_dtype("float32") == 2 * h100.for_dtype("tensorfloat32")  # TF32 is on
    one, _ = device_peak(workers=1, replicas=1, gpus=2)  # a one-device strategy
    assert one.for_dtype("bfloat16") == h100.for_dtype("bfloat16")
    names[gpus[0]] = "NVIDIA A10G"
    peak, why = device_peak(workers=1, replicas=1, gpus=2)
    assert peak is None and "NVIDIA A10G is not in tfopt's table of GPU peaks" in why
    peak, why = device_peak(workers=2, replicas=2, gpus=2)
    assert peak is None and "workers of a cluster" in why
    monkeypatch.undo()
    cpu, _ = device_peak(workers=1, replicas=1, gpus=0)
    assert cpu is not None and cpu.for_dtype("float32") > 0  # this machine's own flags
