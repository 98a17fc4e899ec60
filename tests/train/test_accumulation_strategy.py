"""Gradient accumulation under MirroredStrategy (two logical CPUs, in a subprocess).

Keras 3.15's own accumulation fails there (a merge_call inside ops.cond in the replica
context); tfopt's replaces it. Two replicas of 16 examples accumulating 2 micro-batches must
train exactly as one device on batches of 64.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json
    from tfopt._tf import import_tensorflow
    tf = import_tensorflow()
    # two logical CPUs: possible only before TensorFlow initialises its devices
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import numpy as np
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
