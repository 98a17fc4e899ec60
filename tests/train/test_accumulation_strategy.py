"""Gradient accumulation under MirroredStrategy (two logical CPUs, in a subprocess) and
MultiWorkerMirroredStrategy (two worker processes on localhost).

Keras 3.15's own accumulation fails there (a merge_call inside ops.cond in the replica
context); tfopt's replaces it. Two replicas of 16 examples accumulating 2 micro-batches must
train exactly as one device on batches of 64.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import TWO_LOGICAL_CPUS

SCRIPT = TWO_LOGICAL_CPUS + textwrap.dedent("""
    from tfopt.train.accumulation import make_optimizer

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = rng.integers(0, 3, 256)

    def train(strategy, name, effective, batch):
        with strategy.scope():
            keras.utils.set_random_seed(0)
            inputs = keras.Input((8,))
            hidden = keras.layers.Dense(16, activation="relu")(inputs)
            model = keras.Model(inputs, keras.layers.Dense(3)(hidden))
            optimizer = make_optimizer(name, effective, batch, learning_rate=0.01,
                                       **({"weight_decay": 0.1} if name == "adamw" else {}))
            model.compile(optimizer,
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0)
        return model

    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    result = {}
    for name in ("adam", "adamw"):
        one = train(tf.distribute.get_strategy(), name, 64, 64)  # no accumulation
        two = train(mirrored, name, 64, 32)  # global batch 32 = 2 replicas x 16, 2 steps
        result[name] = {
            "diff": max(float(np.abs(a - b).max())
                        for a, b in zip(one.get_weights(), two.get_weights())),
            "replica_diff": max(
                float(np.abs(v.value.values[0].numpy() - v.value.values[1].numpy()).max())
                for v in two.weights),
            "updates": [int(one.optimizer.iterations), int(two.optimizer.iterations)],
        }
    print(json.dumps(result))
""")


def test_accumulation_under_mirrored_strategy_equals_one_big_batch(tmp_path):
    script = tmp_path / "mirrored_accumulation.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for name, outcome in result.items():
        assert outcome["updates"] == [8, 8], (name, outcome)  # 256 / 64 x 2 epochs
        assert outcome["diff"] < 1e-5, (name, outcome)
        assert outcome["replica_diff"] == 0.0, (name, outcome)  # the copies stay identical


WORKER_SCRIPT = textwrap.dedent("""
    import json, os
    from tfopt._tf import import_tensorflow
    tf = import_tensorflow()
    import keras
    import numpy as np
    from tfopt.train.accumulation import make_optimizer
    from tfopt.distribute.strategy import select_strategy

    workers = "TF_CONFIG" in os.environ
    strategy = select_strategy() if workers else tf.distribute.get_strategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = rng.integers(0, 3, 256)
    with strategy.scope():
        keras.utils.set_random_seed(1)
        inputs = keras.Input((8,))
        hidden = keras.layers.Dense(16, activation="relu")(inputs)
        model = keras.Model(inputs, keras.layers.Dense(3)(hidden))
        # two workers x 16 examples x 2 micro-batches, or one process at 64 without accumulation
        optimizer = (make_optimizer("adam", 64, 32, learning_rate=0.01) if workers
                     else keras.optimizers.Adam(0.01))
        model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32 if workers else 64)
    model.fit(data, epochs=2, verbose=0)
    print("RESULT " + json.dumps({"updates": int(model.optimizer.iterations),
                                  "weights": [w.tolist() for w in model.get_weights()]}),
          flush=True)
""")


def test_accumulation_with_two_workers_equals_one_process_on_the_big_batch(tmp_path):
    import os

    import numpy as np

    from tfopt.distribute.launch import launch_workers

    script = tmp_path / "workers.py"
    script.write_text(WORKER_SCRIPT)
    lines = []
    result = launch_workers([sys.executable, str(script)], 2, grace_seconds=5,
                            on_line=lambda index, stream, line: lines.append((index, line)))
    assert result.exit_code == 0, [line for _, line in lines][-30:]
    reports = [json.loads(line[len("RESULT "):]) for _, line in lines
               if line.startswith("RESULT ")]
    env = {name: value for name, value in os.environ.items() if name != "TF_CONFIG"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    single = json.loads(next(line for line in done.stdout.splitlines()
                             if line.startswith("RESULT "))[len("RESULT "):])
    assert len(reports) == 2
    for report in reports:
        assert report["updates"] == single["updates"] == 8
        for a, b in zip(report["weights"], single["weights"], strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)
    for a, b in zip(reports[0]["weights"], reports[1]["weights"], strict=True):
        np.testing.assert_array_equal(a, b)  # the workers hold identical weights
