"""The in-memory and tf.data sources of tfopt.Run: read into facts, checked, batched as Keras
batches arrays, and a user's dataset kept as written (its shuffling included)."""

from __future__ import annotations

import numpy as np
import pytest

from tfopt.data.inputs import InputKind, held_out, read_input, shown
from tfopt.errors import InvalidArgumentError


def arrays(n=100, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 4), dtype=np.float32), rng.integers(0, 2, n)


def test_a_source_is_named_by_type_and_shape_never_its_values():
    x, y = arrays(60000)
    assert shown((x, y)) == "tuple(float32[60000, 4], int64[60000])"
    assert shown({"a": x}) == "dict(a: float32[60000, 4])"
    with pytest.raises(InvalidArgumentError) as caught:
        read_input((x, y[:10]))
    message = str(caught.value)
    assert "arrays of different lengths (source[0]: 60000, source[1]: 10)" in message
    assert len(message) < 400 and "0." not in message


@pytest.mark.parametrize(("source", "match"), [
    ((np.zeros((3, 2)),), r"source=tuple\(float64\[3, 2\]\): expected \(x, y\) or \(x, y, "
                          r"sample_weight\)"),
    ((np.zeros((3, 2)), np.zeros(3), np.zeros(3), np.zeros(3)), "expected \\(x, y\\)"),
    (({"a": np.zeros(3), "b": np.zeros(4)}, np.zeros(3)), r"source\[0\]\['b'\]: 4"),
    ((np.zeros((0, 2)), np.zeros(0)), "no examples"),
    ((np.array([object(), object()]), np.zeros(2)), "expected an array of numbers"),
    ("not/a/source/kind/but/a/path", "expected TFRecord files"),
    (42, "source=int: expected TFRecord files"),
])
def test_bad_arrays_are_refused_naming_the_argument(source, match):
    with pytest.raises(InvalidArgumentError, match=match):
        read_input(source)


def test_arrays_facts_and_a_validation_split_cut_as_keras_cuts():
    x, y = arrays(100)
    given = read_input((x, y, np.ones(100)))
    assert given.facts.kind is InputKind.ARRAYS and given.facts.examples == 100
    assert given.facts.weighted and given.facts.nbytes == x.nbytes + y.nbytes + 800
    train, held = given.split(0.2)
    assert (len(train), len(held)) == (80, 20)
    np.testing.assert_array_equal(held.x, x[80:])  # the last examples, unshuffled, as Keras
    for bad in (0.0, 1.0, -0.5, float("nan")):
        with pytest.raises(InvalidArgumentError, match="validation="):
            held_out(bad)
    assert held_out("auto") is None and held_out(None) is None
    with pytest.raises(InvalidArgumentError, match="holds out 3 of 3 examples"):
        read_input(arrays(3)).split(0.9)


def test_a_dataframe_needs_its_label_and_numeric_columns_or_named_inputs():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"age": [30, 40, 50, 60], "city": ["a", "b", "a", "c"],
                          "target": [0, 1, 0, 1]})
    with pytest.raises(InvalidArgumentError, match="label=None: a DataFrame source needs"):
        read_input(frame)
    with pytest.raises(InvalidArgumentError, match="label='price': no column 'price'"):
        read_input(frame, label="price")
    given = read_input(frame, label="target")
    assert given.facts.kind is InputKind.DATAFRAME and given.columns == ("age", "city")
    assert given.facts.shown == "DataFrame[4 rows x 3 columns]"
    with pytest.raises(InvalidArgumentError, match="column\\(s\\) 'city' are not numeric"):
        given.features(None)
    named = given.features(["age", "city"])
    assert list(named) == ["age", "city"] and named["city"][2] == "a"
    numeric = read_input(frame.drop(columns="city"), label="target").features(None)
    assert numeric.dtype == np.float32 and numeric.shape == (4, 1)


def test_a_dataset_is_read_batched_or_not_from_its_element_spec(tf):
    x, y = arrays(100)
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    unbatched = read_input(examples).facts
    assert (unbatched.batched, unbatched.examples, unbatched.endless) == (False, 100, False)
    batched = read_input(examples.batch(32)).facts
    assert batched.batched and batched.batch_size is None  # a partial last batch: unknown
    exact = read_input(examples.batch(32, drop_remainder=True)).facts
    assert exact.batched and exact.batch_size == 32
    assert read_input(examples.repeat().batch(8)).facts.endless
    with pytest.raises(InvalidArgumentError, match="expected \\(x, y\\) or \\(x, y, "
                                                   "sample_weight\\) tuples"):
        read_input(tf.data.Dataset.from_tensor_slices({"image": x, "label": y}))
    with pytest.raises(InvalidArgumentError, match="label='y': only for a DataFrame"):
        read_input(examples, label="y")


def test_array_batches_shuffle_each_pass_cover_every_example_and_resume_in_place(tf):
    from tfopt.data.input_pipeline import array_batches

    x = np.arange(10, dtype=np.float32)[:, None]
    y = np.arange(10)
    given = read_input((x, y))

    def stream(skip=0):
        data = array_batches(given, x, 4, training=True, seed=7, skip_batches=skip)
        return [batch[1].numpy().tolist() for batch in data.take(9)]

    batches = stream()
    passes = [sum(batches[i:i + 3], []) for i in (0, 3, 6)]
    assert [len(b) for b in batches[:3]] == [4, 4, 2]  # the last of a pass partial, as Keras's
    assert all(sorted(p) == list(range(10)) for p in passes) and passes[0] != passes[1]
    assert stream(skip=3)[:6] == batches[3:9]  # a resumed stream continues the same order
    evaluation = array_batches(given, x, 4, training=False)
    assert [b[1].numpy().tolist() for b in evaluation] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    kept = array_batches(given, x, 4, training=False, keep_batches=True)
    for _ in range(2):  # the first pass fills the memory, the second reads it: the same batches
        assert [b[1].numpy().tolist() for b in kept] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_a_datasets_reshuffling_continues_where_the_done_epochs_left_it(tf):
    from tfopt.data.input_pipeline import dataset_for_fit

    def make():
        return tf.data.Dataset.range(20).shuffle(20, seed=3).map(lambda v: (v, v)).batch(20)

    first = make()
    epochs = [next(iter(first))[0].numpy().tolist() for _ in range(3)]
    assert epochs[0] != epochs[1]
    resumed = dataset_for_fit(read_input(make()), skip_passes=2)
    assert next(iter(resumed))[0].numpy().tolist() == epochs[2]
