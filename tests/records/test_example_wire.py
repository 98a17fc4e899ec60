"""example_wire (records/format/example_wire.py): what TensorFlow's parser and tfopt's readers
refuse in a serialized tf.train.Example, decided without TensorFlow, checked against TensorFlow
itself."""

from __future__ import annotations

import pytest

from tfopt.records.format.example_pb import example_classes
from tfopt.records.format.example_wire import ExampleProblem, ExampleReader, example_problem


def _good() -> bytes:
    example = example_classes().Example()
    example.features.feature["label"].int64_list.value.append(3)
    example.features.feature["x"].float_list.value.extend([1.0, 2.0])
    example.features.feature["b"].bytes_list.value.append(b"abc")
    return example.SerializeToString(deterministic=True)


def _example(features: bytes) -> bytes:
    assert len(features) < 128
    return b"\x0a" + bytes([len(features)]) + features


def _entry(key: bytes, value: bytes) -> bytes:
    body = b"\x0a" + bytes([len(key)]) + key + b"\x12" + bytes([len(value)]) + value
    return b"\x0a" + bytes([len(body)]) + body


GOOD = _good()
MALFORMED = "malformed"  # TensorFlow's parser takes it, verify does not
# TensorFlow's parser takes it, skipping a top-level field an Example does not have (and its
# data); inspect, the schema sample and verify refuse it
FOREIGN = "foreign"
LABEL = b"\x1a\x03\x0a\x01\x05"  # an int64_list holding [5], packed
# name -> (record, TensorFlow's parser takes it)
RECORDS = {
    "canonical": (GOOD, True),
    "unknown_varint_field": (GOOD + b"\x28\x01", FOREIGN),
    "unknown_bytes_field": (GOOD + b"\x32\x02ab", FOREIGN),
    "sequence_example_feature_lists": (GOOD + b"\x12\x00", FOREIGN),
    "field_1_as_varint": (GOOD + b"\x08\x01", FOREIGN),
    "field_1_as_32_bit": (GOOD + b"\x0d\x00\x00\x80\x3f", FOREIGN),
    "foreign_field_before_a_group": (GOOD + b"\x28\x01\x2b\x2c", False),
    "merged_examples": (GOOD + GOOD, True),
    "value_before_key": (_example(b"\x0a\x0e\x12\x05" + LABEL + b"\x0a\x05label"), True),
    "unpacked_int64": (_example(_entry(b"label", b"\x1a\x02\x08\x07")), True),
    "unpacked_floats": (_example(_entry(b"label", b"\x1a\x02\x08\x07")
                                 + _entry(b"x", b"\x12\x05\x0d\x00\x00\x80\x3f")), True),
    "fields_after_the_list": (_example(_entry(b"label", LABEL + b"\x28\x01")), True),
    "empty_feature": (_example(_entry(b"label", LABEL) + _entry(b"other", b"")), True),
    "group": (GOOD + b"\x2b\x2c", False),
    "deep_groups": (GOOD + b"\x2b" * 50 + b"\x2c" * 50, False),
    "end_group_alone": (GOOD + b"\x2c", False),
    "wire_type_6": (GOOD + b"\x2e\x01", False),
    "wire_type_7": (GOOD + b"\x2f", False),
    "truncated_varint": (GOOD + b"\x28\xff", False),
    # TensorFlow skips an unknown field past the end without a word (it ends the record),
    # and truncates packed floats to whole ones; protobuf, and tfopt's readers, refuse both
    "negative_length": (GOOD + b"\x2a" + b"\xff" * 9 + b"\x01", MALFORMED),
    "length_past_the_end": (GOOD[:-2], False),
    "unknown_field_in_features": (_example(_entry(b"label", LABEL) + b"\x10\x01"), False),
    "entry_without_key": (_example(b"\x0a\x07\x12\x05" + LABEL), False),
    "entry_without_value": (_example(b"\x0a\x07\x0a\x05label"), False),
    "entry_with_a_third_field": (_example(b"\x0a\x11\x0a\x05label\x12\x05" + LABEL
                                          + b"\x18\x01"), False),
    "feature_of_unknown_kind": (_example(_entry(b"label", b"\x22\x02\x08\x05")), False),
    "unknown_field_in_a_list": (_example(_entry(b"label", b"\x1a\x02\x10\x05")), False),
    "packed_floats_not_whole": (_example(_entry(b"x", b"\x12\x05\x0a\x03\x00\x00\x80")),
                                MALFORMED),
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_verdict_is_tensorflows(name, tf):
    record, takes = RECORDS[name]
    example = example_classes().Example.FromString  # what verify reads the features with
    keys = ["label", "x", "b", "other"]
    try:
        present = set(example(record).features.feature) & set(keys)
    except Exception:  # protobuf refuses it too: ask TensorFlow for the label
        present = {"label"}
    kinds = {"label": tf.int64, "x": tf.float32, "b": tf.string, "other": tf.float32}
    spec = {key: tf.io.VarLenFeature(kinds[key]) for key in present or {"label"}}
    try:
        tf.io.parse_example(tf.constant([record]), spec)
        tensorflow_takes = True
    except tf.errors.InvalidArgumentError:
        tensorflow_takes = False
    assert tensorflow_takes is (takes is not False), name
    verify_takes = takes is True
    assert (example_problem(record) is None) is verify_takes, example_problem(record)
    problem = ExampleReader().read(record)[1]
    assert (problem is None) is verify_takes
    if takes in (False, FOREIGN):  # the verdict says whether TensorFlow refuses it too
        assert problem.tensorflow_refuses is (takes is False), problem


def test_problems_say_where_and_why():
    assert example_problem(GOOD + b"\x2b\x2c") == (
        "field 5 of the Example is a group (wire type 3), which TensorFlow's parser refuses")
    assert example_problem(GOOD + b"\x28\xff") == (
        f"the Example: a varint cut short at byte {len(GOOD) + 1} (truncated record?)")
    assert "(a negative length?)" in example_problem(GOOD + b"\x2a" + b"\xff" * 9 + b"\x01")
    assert example_problem(_example(b"\x0a\x07\x0a\x05label")) == (
        "feature entry 0: a key and no value (TensorFlow's parser needs both)")
    assert example_problem(_example(_entry(b"label", b"\x22\x02\x08\x05"))).startswith(
        "feature 'label': starts with tag byte 0x22")


def test_a_million_nested_groups_cost_nothing():
    # the walk stops at the first group: no recursion, no depth limit to meet
    assert "group" in example_problem(GOOD + b"\x2b" * 1_000_000)


def test_canonical_records_take_the_fast_path_and_keep_their_features():
    example, problem = ExampleReader().read(GOOD)
    assert problem is None and sorted(example.features.feature) == ["b", "label", "x"]
    # protobuf keeps a group as an unknown field and writes it back: the walk must see it
    example, problem = ExampleReader().read(GOOD + b"\x2b\x2c")
    assert example is not None and "group" in problem.detail and problem.tensorflow_refuses
    # TensorFlow takes a key that is not UTF-8; protobuf (and tfopt's readers) do not
    example, problem = ExampleReader().read(_example(_entry(b"\xff", LABEL)))
    assert example is None and problem.detail.startswith("protobuf's parser refuses it")
    assert not problem.tensorflow_refuses


def test_a_field_an_example_does_not_have_is_named_with_what_tensorflow_does():
    problem = ExampleReader().read(GOOD + b"\x12\x00")[1]
    assert problem == ExampleProblem(
        f"field 2 (length-delimited) at byte {len(GOOD)} (a tf.train.SequenceExample's "
        "feature_lists?), which an Example does not have; TensorFlow's parser would skip it "
        "and the data it holds", tensorflow_refuses=False)
    assert str(problem).startswith("not a tf.train.Example tfopt reads: field 2 ")
    assert str(ExampleReader().read(GOOD + b"\x08\x01")[1]).startswith(
        f"not a tf.train.Example tfopt reads: field 1 as a varint value at byte {len(GOOD)}, "
        "where an Example's features are length-delimited")
    # a group after it is what TensorFlow refuses: that is the verdict, not the foreign field
    assert str(ExampleReader().read(GOOD + b"\x28\x01\x2b\x2c")[1]).startswith(
        "not a tf.train.Example TensorFlow can parse: field 5 of the Example is a group")
