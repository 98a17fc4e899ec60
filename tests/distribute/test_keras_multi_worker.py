"""Keras 3 under MultiWorkerMirroredStrategy: two real worker processes on localhost.

Each worker trains, evaluates and predicts with ``model.fit``/``evaluate``/``predict`` and prints
its results; one plain process does the same on the same global batch. Without tfopt's fix the
workers fail before the first step (keras-team/keras#20585).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from tfopt.distribute.launch import launch_workers  # noqa: E402

GLOBAL_BATCH = 32

TRAIN_SCRIPT = textwrap.dedent(f"""
    import json, sys
    from tfopt._tf import import_tensorflow
    tf = import_tensorflow()
    import keras
    import numpy as np
    import tfopt
    from tfopt.train.sync_batch_norm import synchronize_batch_norm

    fix = sys.argv[1] == "fix"
    if fix:
        strategy = tfopt.select_strategy()
    else:  # Keras as it ships
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(288, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 3))).argmax(axis=1).astype("int32")
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.BatchNormalization(),
                                  keras.layers.Dense(3, activation="softmax")])
        model.compile(optimizer=keras.optimizers.SGD(0.1), steps_per_execution=2,
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    # batch statistics over the global batch: the same moving statistics on every worker
    switched = synchronize_batch_norm(model) if fix else 0
    # 9 global batches: the last of the executions of 2 steps has one step
    # the global batch: under the strategy each of the two workers computes half of it
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch({GLOBAL_BATCH})
    history = model.fit(data, epochs=3, verbose=0)
    evaluated = model.evaluate(data, verbose=0, return_dict=True)
    # fewer batches than steps_per_execution: the one execution ends early, still counted
    one_batch = model.evaluate(data.take(1), verbose=0, return_dict=True)
    predicted = model.predict(tf.data.Dataset.from_tensor_slices(x).batch({GLOBAL_BATCH}),
                              verbose=0)
    from tensorflow.python.eager import context  # private: what the strategy was given
    coordination = context.context().coordination_service
    print("RESULT " + json.dumps({{
        "replicas": int(strategy.num_replicas_in_sync),
        "heartbeat_ms": coordination and coordination.heartbeat_timeout_in_ms,
        "switched": switched,
        "history": history.history,
        "evaluate": evaluated,
        "evaluate_one_batch": one_batch,
        "predicted_shape": list(predicted.shape),
        "weights": [w.tolist() for w in model.get_weights()],
    }}), flush=True)
""")


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("multi_worker") / "train.py"
    path.write_text(TRAIN_SCRIPT)
    return path


def run_two_workers(script, mode):
    lines = []
    result = launch_workers([sys.executable, str(script), mode], 2, grace_seconds=5,
                            on_line=lambda index, stream, line: lines.append((index, line)))
    reports = {index: json.loads(line[len("RESULT "):]) for index, line in lines
               if line.startswith("RESULT ")}
    return result, reports, lines


def run_one_process(script):
    env = {name: value for name, value in os.environ.items() if name != "TF_CONFIG"}
    done = subprocess.run([sys.executable, str(script), "fix"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_two_workers_train_to_identical_weights_equal_to_one_process(script):
    result, reports, lines = run_two_workers(script, "fix")
    assert result.exit_code == 0, [line for _, line in lines][-30:]
    assert sorted(reports) == [0, 1]
    first, second = reports[0], reports[1]
    assert first["replicas"] == second["replicas"] == 2
    assert first["switched"] == 1
    # launched workers: the launcher watches them, so a late heartbeat does not end the job
    assert first["heartbeat_ms"] == second["heartbeat_ms"] == 60_000
    for a, b in zip(first["weights"], second["weights"], strict=True):
        np.testing.assert_array_equal(a, b)  # synchronous training: bit-identical replicas
    assert first["history"] == second["history"]

    single = run_one_process(script)
    assert single["replicas"] == 1 and single["heartbeat_ms"] is None
    # two workers of half a global batch each take the same steps as one process on all of it
    np.testing.assert_allclose(first["history"]["loss"], single["history"]["loss"], rtol=1e-5)
    np.testing.assert_allclose(first["history"]["accuracy"], single["history"]["accuracy"],
                               atol=1e-6)
    for a, b in zip(first["weights"], single["weights"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert single["history"]["loss"][-1] < single["history"]["loss"][0]  # it did learn
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(first["evaluate"][key], single["evaluate"][key], rtol=1e-5)
    assert set(first["evaluate_one_batch"]) == {"loss", "accuracy"}
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(first["evaluate_one_batch"][key],
                                   single["evaluate_one_batch"][key], rtol=1e-5)
    # predict gathers every worker's shard: one row per example, as in one process
    assert first["predicted_shape"] == second["predicted_shape"] == [288, 3]


def test_keras_as_shipped_still_fails_so_the_fix_is_needed(script):
    """On the tested Keras releases the fix is needed; a newer release may have fixed it."""
    from tfopt.distribute.keras_multi_worker import TESTED_KERAS

    release = ".".join(keras.__version__.split(".")[:2])
    if release not in TESTED_KERAS:
        pytest.skip(f"Keras {keras.__version__} is not among the tested releases "
                    f"{TESTED_KERAS}: check whether it still needs tfopt/distribute/keras_multi_worker.py")
    result, reports, lines = run_two_workers(script, "plain")
    assert result.exit_code != 0 and not reports, (
        "Keras now trains under MultiWorkerMirroredStrategy without tfopt's fix: review "
        "tfopt/distribute/keras_multi_worker.py")
    assert any("PerReplica" in line for _, line in lines)


def test_a_keras_without_the_replaced_functions_is_refused_with_the_tested_versions(monkeypatch):
    from keras.src.backend.tensorflow import trainer

    from tfopt.distribute.keras_multi_worker import TESTED_KERAS, fix_keras_multi_worker
    from tfopt.errors import TfoptError

    monkeypatch.delattr(trainer.TensorFlowTrainer, "_make_function")
    with pytest.raises(TfoptError, match="TensorFlowTrainer._make_function") as caught:
        fix_keras_multi_worker()
    assert TESTED_KERAS[-1] in str(caught.value)


HEARTBEAT_SCRIPT = textwrap.dedent("""
    import os, sys
    if sys.argv[1] == "elsewhere":  # a cluster started by other means than tfopt launch
        del os.environ["TFOPT_LAUNCHED"]
    import tfopt
    from tfopt._tf import import_tensorflow
    tf = import_tensorflow()
    strategy = tfopt.select_strategy()
    from tensorflow.python.eager import context
    print("HEARTBEAT", context.context().coordination_service.heartbeat_timeout_in_ms,
          strategy.num_replicas_in_sync, flush=True)
""")


def test_only_launched_workers_wait_longer_for_heartbeats_than_tensorflow(tmp_path):
    script = tmp_path / "heartbeat.py"
    script.write_text(HEARTBEAT_SCRIPT)
    for mode, expected in (("launched", "60000"), ("elsewhere", "0")):  # 0: TensorFlow's 10 s
        lines: list[str] = []
        result = launch_workers([sys.executable, str(script), mode], 2, grace_seconds=5,
                                on_line=lambda index, stream, line, lines=lines:
                                lines.append(line))
        assert result.exit_code == 0, lines[-30:]
        assert [line for line in lines if line.startswith("HEARTBEAT")] == [
            f"HEARTBEAT {expected} 2"] * 2, lines[-30:]
