"""``tfopt analyze FILE.py:FUNCTION`` on a real example file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from conftest import one_error_line

from tfopt.cli import cli

# the analysis's verdicts rest on measured rates: no other test beside them (scripts/test.sh)
pytestmark = pytest.mark.alone

EXAMPLE = textwrap.dedent('''
    import tensorflow as tf
    from helper import double  # the file's folder is importable

    def pipeline():
        return (tf.data.Dataset.range(10**6).map(double, name="double").batch(32)
                .prefetch(2))

    def sequential_lookup():
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(["a", "b"], [1, 2], value_dtype=tf.int64), -1)

        def heavy(word):
            m = tf.fill([128, 128], tf.cast(table.lookup(word), tf.float32) * 1e-3)
            for _ in range(6):
                m = tf.matmul(m, m) * 1e-3
            return tf.reduce_sum(m)

        return tf.data.Dataset.from_tensor_slices(["a", "b", "c"] * 100).map(
            heavy, name="lookup").batch(8)

    def not_a_dataset():
        return [1, 2, 3]
''')


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def example(tmp_path):
    (tmp_path / "helper.py").write_text("def double(x):\n    return x * 2\n")
    path = tmp_path / "example.py"
    path.write_text(EXAMPLE)
    return path


def test_json_names_the_bottleneck(example):
    result = run("analyze", f"{example}:pipeline", "--seconds", "0.6", "--cores", "2",
                 "--ram-budget", "64MiB", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    labels = [s["label"] for s in data["stages"]]
    assert "double" in labels and data["bottleneck"] in labels
    assert data["ram_budget"] == 64 << 20 and data["cores"] == 2
    assert "analyze: measuring" in result.stderr


def test_the_table(example):
    result = run("analyze", f"{example}:pipeline", "--seconds", "0.5")
    assert result.exit_code == 0, result.output
    assert "bottleneck:" in result.stdout and "double" in result.stdout


def test_apply_makes_the_rewrites_and_measures_before_and_after(example):
    result = run("analyze", f"{example}:sequential_lookup", "--seconds", "3", "--cores", "2",
                 "--apply", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    optimization = data["optimization"]
    considered = optimization["changes"] + optimization["skipped"]
    assert [c["stage"] for c in considered if c["kind"] == "parallelize"] == ["lookup"]
    assert optimization["before_per_s"] > 0 and optimization["after_per_s"] > 0
    assert "the rewrite: as written" in result.stderr
    table = run("analyze", f"{example}:sequential_lookup", "--seconds", "2", "--apply", "-q")
    assert table.exit_code == 0 and "rewrites (tfopt.optimize):" in table.stdout
    assert "measured:" in table.stdout and table.stderr == ""


@pytest.mark.parametrize("suffix, expected", [
    ("missing.py:pipeline", "no such file"),
    ("example.py:nothing", "has no function 'nothing'"),
    ("example.py:not_a_dataset", "returned list, not a tf.data.Dataset"),
])
def test_errors_are_one_line(example, suffix, expected):
    result = run("analyze", f"{example.parent / suffix}", "--seconds", "0.5", "-q")
    assert expected in one_error_line(result)


KERAS_FOLDER_EXAMPLE = textwrap.dedent('''
    import keras
    import tensorflow as tf


    def pipeline():  # Keras's "image classification from scratch": a lambda maps the folder
        train = keras.utils.image_dataset_from_directory(
            "images", image_size=(32, 32), batch_size=4, verbose=False)
        flip = keras.layers.RandomFlip("horizontal")
        return train.map(lambda image, label: (flip(image), label),
                         num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
''')


def test_autograph_converts_a_lambda_of_the_file_without_a_warning(tmp_path):
    # AutoGraph finds a lambda's source through the module in sys.modules; the file, imported
    # by path and not registered there, made TensorFlow print "AutoGraph could not transform
    # <lambda> ... Please report this to the TensorFlow team" (importing it did not)
    import tfopt

    tfopt.make_demo_data(tmp_path / "images", count=8, classes=2, min_size=40, max_size=48,
                         workers=1)
    (tmp_path / "example.py").write_text(KERAS_FOLDER_EXAMPLE)
    done = subprocess.run([sys.executable, "-m", "tfopt", "analyze", "example.py:pipeline",
                           "--seconds", "0.5", "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bottleneck:" in done.stdout, done.stdout
    assert "AutoGraph could not transform" not in done.stderr, done.stderr[-3000:]
    assert "TensorFlow team" not in done.stderr, done.stderr[-3000:]
