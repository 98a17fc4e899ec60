"""A model with tfopt's Keras objects saves and loads in a fresh process after ``import tfopt``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SAVE = textwrap.dedent("""
    import sys
    import keras
    import numpy as np
    import tfopt

    inputs = keras.Input((12, 12, 3), dtype="uint8")
    x = tfopt.Augment(output_size=8, random_crop=True, seed=3)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(2)(x))
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    model.compile(tfopt.make_optimizer("sgd", 8, 4, learning_rate=schedule), "mse")
    images = np.random.default_rng(0).integers(0, 256, (4, 12, 12, 3), dtype=np.uint8)
    model.fit(images, np.zeros((4, 2)), batch_size=4, verbose=0)
    model.save(sys.argv[1])
    np.save(sys.argv[2], model.predict(images, verbose=0))
""")

LOAD = textwrap.dedent("""
    import json, sys
    import tfopt

    result = {"tf_after_import": "tensorflow" in sys.modules}
    import keras
    import numpy as np

    try:  # Keras alone does not know tfopt's classes
        keras.models.load_model(sys.argv[1])
        result["plain"] = "loaded"
    except Exception as error:
        result["plain"] = type(error).__name__
    objects = tfopt.keras_objects()
    result["names"] = sorted(objects)
    model = keras.models.load_model(sys.argv[1], custom_objects=objects)
    again = keras.models.load_model(sys.argv[1])  # registered by the call above
    images = np.random.default_rng(0).integers(0, 256, (4, 12, 12, 3), dtype=np.uint8)
    expected = np.load(sys.argv[2])
    result["same_outputs"] = bool(np.allclose(model.predict(images, verbose=0), expected)
                                  and np.allclose(again.predict(images, verbose=0), expected))
    result["schedule"] = type(model.optimizer._learning_rate).__name__
    result["augment"] = type(model.layers[1]).__name__
    print(json.dumps(result))
""")


def run(tmp_path, name, source, *args):
    script = tmp_path / name
    script.write_text(source)
    done = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_saved_model_loads_in_a_fresh_process_with_keras_objects(tmp_path):
    path, outputs = tmp_path / "m.keras", tmp_path / "out.npy"
    run(tmp_path, "save.py", SAVE, path, outputs)
    result = json.loads(run(tmp_path, "load.py", LOAD, path, outputs).strip().splitlines()[-1])
    assert result["tf_after_import"] is False  # import tfopt still imports no TensorFlow
    assert result["plain"] != "loaded"  # why keras_objects exists (lazy exports register late)
    assert result["names"] == ["tfopt>Augment", "tfopt>UpdateStepSchedule"]
    assert result["same_outputs"]
    assert (result["schedule"], result["augment"]) == ("UpdateStepSchedule", "Augment")
